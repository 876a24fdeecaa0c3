// Moves between placements, element by element: a tensor made in one SBP on
// one placement (optionally turned into partial sums there first) and read
// in another SBP on another placement must equal the logical tensor, for
// placements on one node and across 2 and 3 nodes, of 1 to 6 devices, 1-D
// and 2-D, with shapes that do not divide evenly (and pieces with no rows).
// Values are small integers, so every sum is exact in f32: results compare
// with ==. Runs in-process (tests/runtime/numerics_reference.h run_nodes).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "graph/placement.h"
#include "tests/runtime/numerics_reference.h"

namespace rill {
namespace {

constexpr int kRows = 7, kCols = 5;

// x [7, 5] read on `from`; a = identity(x) there in `in`, p = identity(a)
// there, hinted P if `partial`; y = identity(p) on `to`, hinted `out`; y is
// fetched whole.
graph::Job move_job(const std::string& from, const std::string& in, bool partial, const std::string& to,
                    const std::string& out) {
  std::vector<float> values;
  for (int i = 0; i < kRows * kCols; ++i) values.push_back(static_cast<float>(i));
  const std::string text = fmt::format(R"({{
    "name": "move",
    "datasets": [{{"name": "d", "kind": "inline", "tensors": [
      {{"name": "x", "shape": [{0}, {1}], "data": [{2}]}}]}}],
    "inputs": [{{"name": "x", "dataset": "d", "field": "x", "shape": [{1}], "placement": "{4}"}}],
    "ops": [{{"name": "a", "type": "identity", "inputs": ["x"], "sbp": ["{3}"], "placement": "{4}"}},
            {{"name": "p", "type": "identity", "inputs": ["a"], "sbp": ["{5}"], "placement": "{4}"}},
            {{"name": "y", "type": "identity", "inputs": ["p"], "sbp": ["{6}"], "placement": "{7}"}},
            {{"name": "loss", "type": "reduce_sum", "inputs": ["y"]}}],
    "loss": "loss",
    "fetch": ["y"],
    "train": {{"steps": 1, "batch_size": {0}, "shuffle": false}}
  }})",
                                       kRows, kCols, testing::json_floats(values), in, from, partial ? "P" : "", out,
                                       to);
  auto job = graph::parse_job_json(text, "move.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

std::vector<float> fetched_y(const graph::Job& job, int nodes, const std::string& devices) {
  auto cluster = compiler::parse_devices(devices, nodes);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {.steps = 1});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  std::vector<float> y;
  testing::run_nodes(*plan, nodes, [&](RunOptions& options) {
    options.on_step = [&](const StepMetrics& m) {
      REQUIRE(m.fetched.size() == 1);
      const TensorView& v = *m.fetched[0];
      const float* data = static_cast<const float*>(v.data);
      y.assign(data, data + num_elements(v.shape));
    };
  });
  return y;
}

struct Pair {
  int nodes;
  const char* devices;
  const char* from;
  const char* to;
  std::vector<const char*> in;   // SBPs of a on `from`
  std::vector<const char*> out;  // SBPs of y on `to`
};

TEST_CASE("moves between placements equal the logical tensor: any SBP to any, partial sums settled first") {
  const std::vector<Pair> pairs = {
      // One node: 3 devices to the other 2 (uneven rows 3, 2, 2 -> 4, 3).
      {1, "cpu:5", "cpu 0:0-2", "cpu 0:3-4", {"S(0)", "S(1)", "B"}, {"S(0)", "S(1)", "B"}},
      // Across nodes: node 0's 3 devices to node 1's 2; slices cut on node 0.
      {2, "cpu:3", "cpu 0:0-2", "cpu 1:0-1", {"S(0)", "S(1)", "B"}, {"S(0)", "S(1)", "B"}},
      // One device to 6 over 2 nodes: 5 columns over 6 devices leaves one empty.
      {2, "cpu:3", "cpu 1:2", "cpu 0-1:0-2", {"B"}, {"S(0)", "S(1)", "B"}},
      // The same nodes, other devices; 3 nodes, a 2-D source.
      {2, "cpu:3", "cpu 0-1:0", "cpu 0-1:1-2", {"S(0)", "B"}, {"S(1)", "B"}},
      {3, "cpu:2", "cpu [2,2] 0-1:0-1", "cpu 1-2:1", {"(S(0), B)", "(B, S(0))", "S(0)"}, {"S(0)", "S(1)", "B"}},
      {3, "cpu:2", "cpu 2:0-1", "cpu [3,2] 0-2:0-1", {"S(0)", "B"}, {"(S(0), S(1))", "(B, S(0))", "(S(1), B)"}},
  };
  std::vector<float> want;
  for (int i = 0; i < kRows * kCols; ++i) want.push_back(static_cast<float>(i));
  for (const Pair& pair : pairs)
    for (const char* in : pair.in)
      for (bool partial : {false, true})
        for (const char* out : pair.out) {
          const std::string what = fmt::format("{} x {}: {} on '{}'{} -> {} on '{}'", pair.nodes, pair.devices, in,
                                               pair.from, partial ? " (made P)" : "", out, pair.to);
          CAPTURE(what);
          CHECK(fetched_y(move_job(pair.from, in, partial, pair.to, out), pair.nodes, pair.devices) == want);
        }
}

}  // namespace
}  // namespace rill
