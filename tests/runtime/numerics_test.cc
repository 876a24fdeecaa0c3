// Data parallelism changes nothing but the order of float sums. These tests
// check that claim where rounding cannot pile up: one training step, whose
// gradients every device count and node count must reproduce within a bound
// derived from float error analysis, not tuned to a machine.
//
// Why the bound holds on any CPU. Every result compared here is a sum of
// products: GEMMs (OpenBLAS picks its kernel, blocking and FMA use by CPU),
// the batch sum of a weight gradient (split over devices, then summed by the
// all-reduce in ring order), softmax's sum of expf values. For any summation
// order, any blocking and with or without FMA, a float sum of n products obeys
// |fl(sum a_i b_i) - sum a_i b_i| <= gamma_n * sum |a_i b_i|, gamma_n = n u / (1 - n u),
// u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, 3.1).
// The reference below runs the same network in double and carries, beside
// every value, that bound plus the first-order effect of its inputs' errors
// (running error analysis). ReLU masks whose input lies within its own error
// bound of zero count as possibly flipped. expf and logf are within 1 ulp in
// glibc on every ifunc variant, covered by a few u per element. The result is
// a per-element bound E on |computed - exact| for any correct float
// implementation; we check |g_run - g_exact| <= 2 E (2: second-order terms,
// orders of magnitude below E here). Two runs then agree within 4 E.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/runtime/numerics_reference.h"

namespace rill {

using namespace testing;

TEST_CASE("one step's gradients on cpu:1, cpu:2, cpu:3 and 2 nodes x 2 devices are the exact ones within float error bounds") {
  Problem problem = make_problem();
  Reference ref = reference(problem.x, problem.y, problem.weights);

  // The bound is meaningful: worst-case bounds grow with depth (here about
  // 1e-3 of the largest gradient), still far below what a lost shard, a
  // doubled sum or a wrong 1/B scale would change (a third or more).
  for (const auto& [name, g] : ref.grads) {
    double max_g = 0, max_e = 0;
    for (size_t i = 0; i < g.v.size(); ++i) max_g = std::max(max_g, std::abs(g.v[i])), max_e = std::max(max_e, g.e[i]);
    CAPTURE(name);
    CHECK(max_e < 1e-2 * max_g);
  }

  struct Layout {
    int nodes;
    const char* devices;
  };
  for (Layout layout : {Layout{1, "cpu:1"}, Layout{1, "cpu:2"}, Layout{1, "cpu:3"}, Layout{2, "cpu:2"}}) {
    CAPTURE(layout.nodes);
    CAPTURE(layout.devices);
    check_one_step(problem, ref, layout.nodes, layout.devices);
  }
}

// Model parallelism changes the order of the sums too, in other places: with
// w1 split by columns and w2 by rows (the Megatron layout), fc2's inner
// product is summed in parts on each device, then across them by boxing.
// The bound above holds for any order, so the same check applies. The data
// is replicated (inputs B), so every device computes on the whole batch.
TEST_CASE("model parallel (w1 S(1), b1 S(0), w2 S(0)) and hybrid layouts give the exact gradients within float error bounds") {
  Problem data = make_problem();
  Reference ref = reference(data.x, data.y, data.weights);
  Problem megatron =
      with_sbp(data, {{"w1", Sbp::split(1)}, {"b1", Sbp::split(0)}, {"w2", Sbp::split(0)}}, Sbp::broadcast());
  // Every weight split, the batch split too: each device holds a quarter or
  // a third of each matrix, and every boxing kind appears.
  Problem all_split = with_sbp(data,
                               {{"w1", Sbp::split(1)}, {"b1", Sbp::split(0)}, {"w2", Sbp::split(0)},
                                {"w3", Sbp::split(1)}, {"b3", Sbp::split(0)}},
                               std::nullopt);
  struct Layout {
    int nodes;
    const char* devices;
  };
  for (const Problem* problem : {&megatron, &all_split})
    for (Layout layout : {Layout{1, "cpu:2"}, Layout{1, "cpu:3"}, Layout{2, "cpu:1"}, Layout{3, "cpu:1"}, Layout{2, "cpu:2"}}) {
      CAPTURE(problem == &megatron ? "megatron" : "all split");
      CAPTURE(layout.nodes);
      CAPTURE(layout.devices);
      check_one_step(*problem, ref, layout.nodes, layout.devices);
    }
}

// 2-D SBP over [nodes, devices]: the same bound, since only the order and
// grouping of the sums change. Hybrid: data parallel across nodes, the
// Megatron layout within each node. Its transpose: data parallel within
// each node, the matrices split across nodes. On one node, or one device per
// node, each reduces to a 1-D layout (the SBP of the trivial axis is moot).
// ZeRO (train.zero): the variables split S(0), their gradients
// reduce-scattered and summed by the device threads slice by slice. Only
// the grouping of the sums changes: the same bound.
TEST_CASE("train.zero (variables split S(0), gradients reduce-scattered) gives the exact gradients") {
  Problem data = make_problem();
  Reference ref = reference(data.x, data.y, data.weights);
  Problem zero = data;
  zero.job.train.zero = true;
  for (auto [nodes, devices] : {std::pair{1, "cpu:2"}, std::pair{1, "cpu:3"}, std::pair{2, "cpu:2"}}) {
    CAPTURE(nodes);
    CAPTURE(devices);
    check_one_step(zero, ref, nodes, devices);
  }
}

TEST_CASE("2-D SBP layouts (data parallel across nodes, model parallel within, and the reverse) give the exact gradients") {
  Problem data = make_problem();
  Reference ref = reference(data.x, data.y, data.weights);
  const Sbp b = Sbp::broadcast(), s0 = Sbp::split(0), s1 = Sbp::split(1);
  Problem hybrid = with_sbp(data, {{"w1", NdSbp(b, s1)}, {"b1", NdSbp(b, s0)}, {"w2", NdSbp(b, s0)}}, NdSbp(s0, b));
  Problem reverse = with_sbp(data, {{"w1", NdSbp(s1, b)}, {"b1", NdSbp(s0, b)}, {"w2", NdSbp(s0, b)}, {"w3", NdSbp(s1, s0)}},
                             NdSbp(b, s0));
  for (const Problem* problem : {&hybrid, &reverse})
    for (auto [nodes, devices] : {std::pair{2, "cpu:2"}, std::pair{3, "cpu:2"}, std::pair{2, "cpu:3"}, std::pair{1, "cpu:2"},
                                  std::pair{2, "cpu:1"}}) {
      CAPTURE(problem == &hybrid ? "hybrid" : "reverse");
      CAPTURE(nodes);
      CAPTURE(devices);
      check_one_step(*problem, ref, nodes, devices);
    }
}

// Placements: the network cut into stages, each on its own devices, the
// tensors between them moved (sliced, sent, assembled) and each stage's
// gradients summed among its own devices only. Moves copy values and never
// add, so only the grouping of the sums changes again: the same bound.
TEST_CASE("jobs cut into stages on placements of their own give the exact gradients") {
  Problem data = make_problem();
  Reference ref = reference(data.x, data.y, data.weights);
  auto staged = [&](const std::vector<std::pair<std::string, std::vector<std::string>>>& stages,
                    const std::map<std::string, NdSbp>& variables) {
    Problem p = with_sbp(data, variables, std::nullopt);
    for (const auto& [placement, members] : stages) {
      auto parsed = graph::parse_placement(placement);
      REQUIRE_MESSAGE(parsed.ok(), parsed.status().to_string());
      p.job.groups.push_back({placement, *parsed, members});
    }
    return p;
  };
  const std::vector<std::string> first = {"x", "y", "w1", "b1", "fc1", "z1", "h1"};
  const std::vector<std::string> second = {"w2", "b2", "fc2", "z2", "h2", "w3", "b3", "fc3", "z3", "xent", "loss"};
  const Sbp b = Sbp::broadcast(), s1 = Sbp::split(1);
  struct Case {
    const char* what;
    int nodes;
    const char* devices;
    Problem problem;
  };
  const std::vector<Case> cases = {
      {"one device per stage, one stage per node", 2, "cpu:1", staged({{"cpu 0:0", first}, {"cpu 1:0", second}}, {})},
      {"a data-parallel stage, then a one-device stage, on one node", 1, "cpu:3",
       staged({{"cpu 0:0-1", first}, {"cpu 0:2", second}}, {})},
      // Stage 0's gradients are summed between nodes 0 and 1 only; stage 1
      // splits w3 by columns, so h2's gradient is partial there and is
      // reduced before it moves.
      {"a data-parallel stage over 2 nodes, then a model-parallel stage", 3, "cpu:2",
       staged({{"cpu 0-1:0-1", first}, {"cpu 2:0-1", second}}, {{"w3", s1}, {"b3", Sbp::split(0)}})},
      {"a 2-D stage (data parallel across nodes, Megatron within), then a stage on the third node", 3, "cpu:2",
       staged({{"cpu [2,2] 0-1:0-1", first}, {"cpu 2:0-1", second}}, {{"w1", NdSbp(b, s1)}, {"b1", NdSbp(b, Sbp::split(0))}})},
      {"the whole job on nodes 1 and 2 of 3: collectives among those two only", 3, "cpu:2",
       [&] {
         std::vector<std::string> all = first;
         all.insert(all.end(), second.begin(), second.end());
         return staged({{"cpu 1-2:0-1", all}}, {});
       }()},
      // The labels read on stage 1, where the loss is: its sources must
      // draw the same rows as stage 0's images (the batch split 2 ways
      // there, 4 ways here).
      {"labels read on the last stage", 3, "cpu:2",
       staged({{"cpu 0:0-1", {"x", "w1", "b1", "fc1", "z1", "h1"}},
               {"cpu 1-2:0-1", {"y", "w2", "b2", "fc2", "z2", "h2", "w3", "b3", "fc3", "z3", "xent", "loss"}}},
              {})},
      {"stages on overlapping devices in reverse order", 2, "cpu:2",
       staged({{"cpu 1:0-1", first}, {"cpu 0-1:1", second}}, {{"w2", Sbp::split(0)}})},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    check_one_step(c.problem, ref, c.nodes, c.devices);
  }
}

}  // namespace rill
