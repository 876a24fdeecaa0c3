// The mixture-of-experts sample (samples/gpt_moe) in its layouts: its
// experts split over 2 devices (expert parallelism: the tokens reach their
// experts' devices by all-to-all, S(1) -> S(0) of [E, G, C, d], and come
// back the same way) and over 2 agents train as one device does.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "process_util.h"
#include "run_results.h"

namespace {

using rill::testing::Ran;
using rill::testing::read_json;
using rill::testing::root;

// 10 steps of the sample from the tree's root (its text is named from there).
nlohmann::json moe_curve(const std::string& layout, const std::string& name) {
  const auto result = rill::testing::temp_dir("rill-moe-") / (name + ".json");
  Ran ran = rill::testing::run_shell("cd " + root() + " && " + rill::testing::binary() +
                                     " run samples/gpt_moe/gpt_moe.json " + layout +
                                     " --steps 10 --set eval=off --set generate=off --result " + result.string());
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  const auto j = read_json(result);
  REQUIRE(j["loss_curve"].size() == 10);
  CHECK(j["train_metrics"].contains("balance"));
  return j["loss_curve"];
}

}  // namespace

// Layouts change the order of float sums (the gradients' reductions), about
// 1e-7 of a value a step, as for the dense samples (1e-5 over 10 steps:
// tests/e2e/cluster_test.cc). Routing is discrete: a token whose two
// experts' probabilities lie closer than that takes the other expert, which
// moves the mean loss by at most that token's share (1 of the 2,048 a batch
// holds) of a change in its loss of at most about 1 here: 5e-4 of a value
// near 5, so 1e-3 holds with room; a token sent to the wrong device's
// experts, or not combined back, would be off by far more.
TEST_CASE("the MoE sample's experts over 2 devices and over 2 agents train as on one device, through all-to-alls") {
  Ran plan = rill::testing::run_rill("plan " + root() + "/samples/gpt_moe/gpt_moe.json --devices cpu:2 --json");
  REQUIRE_MESSAGE(plan.code == 0, plan.output);
  const auto j = nlohmann::json::parse(plan.output.substr(plan.output.find('{')));
  int to_experts = 0, back = 0;
  for (const auto& t : j["tasks"]) {
    const std::string name = t["name"];
    to_experts += name.rfind("boxing:h0.tokens:S(1)->S(0)", 0) == 0;
    back += name.rfind("boxing:h0.experts:S(0)->S(1)", 0) == 0;
  }
  CHECK(to_experts == 2);  // one piece a device
  CHECK(back == 2);
  const auto one = moe_curve("--devices cpu:1", "one");
  const auto two = moe_curve("--devices cpu:2", "two");
  const auto nodes = moe_curve("--nodes 2 --devices cpu:1 --ctrl-port 18740", "nodes");
  for (size_t i = 0; i < 10; ++i) {
    CAPTURE(i);
    const double want = one[i].get<double>();
    CHECK(std::abs(two[i].get<double>() - want) <= 1e-3 * std::abs(want));
    CHECK(std::abs(nodes[i].get<double>() - want) <= 1e-3 * std::abs(want));
  }
  CHECK(one[9].get<double>() < one[0].get<double>() - 0.5);  // it learns
}

// Experts x data (samples/gpt_moe/gpt_moe_2d.json) on 2 nodes x 2 devices:
// the groups split across nodes and the experts within each, so tokens move
// by all-to-all inside a node only, and the experts' gradients are summed
// across nodes (its losses against PyTorch: tests/torch/moe_torch_check.py).
TEST_CASE("the MoE sample's experts x data layout moves tokens within nodes and sums expert gradients across them") {
  Ran plan = rill::testing::run_rill("plan " + root() + "/samples/gpt_moe/gpt_moe_2d.json --nodes 2 --devices cpu:2 --json");
  REQUIRE_MESSAGE(plan.code == 0, plan.output);
  const auto j = nlohmann::json::parse(plan.output.substr(plan.output.find('{')));
  int within = 0, across = 0;
  for (const auto& t : j["tasks"]) {
    const std::string name = t["name"];
    within += name.rfind("boxing:h0.tokens:S(1)->(S(1), S(0))", 0) == 0;
    across += name.rfind("boxing:grad/h0.fc/matmul_1:(P, S(0))->(B, S(0))", 0) == 0;
  }
  CHECK(within == 4);  // one piece a device
  CHECK(across == 2);  // one all-reduce a node's lane
}
