// Moves between placements, element by element: a tensor made in one SBP on
// one placement (optionally turned into partial sums there first) and read
// in another SBP on another placement must equal the logical tensor, for
// placements on one node and across 2 and 3 nodes, of 1 to 6 devices, 1-D
// and 2-D, with shapes that do not divide evenly (and pieces with no rows).
// Values are small integers, so every sum is exact in f32: results compare
// with ==. Runs in-process (tests/runtime/numerics_reference.h run_nodes).
#include <doctest/doctest.h>

#include <map>
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
// A tensor crossing nodes is copied once in user space, on the receiving
// side: from the transport's buffer into the mirror slot its readers read
// (no Send or Recv task copies it, and a node with several readers of one
// regst gets its bytes once). Counted on each node against what the plan
// says crosses: every regst read on another node, once per (regst, node)
// and time it is readied.
TEST_CASE("a regst read on another node is copied once there, straight into the slot its readers read") {
  const int steps = 3;
  graph::Job job = move_job("cpu 0:0-1", "B", false, "cpu 1:0-1", "B");
  job.train.steps = steps;
  auto cluster = compiler::parse_devices("cpu:2", 2);
  REQUIRE(cluster.ok());
  auto bytes = compiler::compile(job, *cluster, {});
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  const plan::Plan& plan = *compiler::verify_plan(*bytes).value();
  std::vector<int64_t> expected(2, 0);
  bool shared = false;  // some node reads a regst of another with two tasks
  for (const plan::Task* t : *plan.tasks())
    CHECK((t->kind() != plan::TaskKind::Send && t->kind() != plan::TaskKind::Recv));
  for (const plan::RegstDesc* r : *plan.regsts()) {
    std::map<uint32_t, int> readers;  // node -> tasks reading r there
    for (uint64_t c : *r->consumers())
      if (ActorId::node(c) != ActorId::node(r->producer())) ++readers[ActorId::node(c)];
    for (const auto& [node, count] : readers) {
      expected[node] += r->bytes() * r->readies_per_step() * steps;
      shared = shared || count > 1;
    }
  }
  CHECK(shared);
  CHECK(expected[1] >= steps * kRows * kCols * 4);  // p, whole, to node 1's two devices
  auto reports = testing::run_nodes(*bytes, 2, [](RunOptions&) {});
  for (int node = 0; node < 2; ++node) {
    CAPTURE(node);
    CHECK(reports[node].received_bytes_copied == expected[node]);
  }
}

}  // namespace rill
