// Dropout under every layout: its mask is a function of an element's place
// in the logical tensor, the step and the micro-batch (kernels/ops/
// dropout_math.h), so data parallelism on 2 and 3 devices, Megatron's split
// of the hidden layer, micro-batches and 2 nodes all train as one device
// does, and an eval pass drops nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "graph/job_file.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

// An MLP with dropout on its hidden layer, trained 10 steps by SGD on
// synthetic data; `hints` places the weights (Megatron: w1 S(1), b1 S(0),
// w2 S(0), so the dropout reads its input split by columns).
graph::Job dropout_mlp(const std::string& w1_sbp = "", const std::string& b1_sbp = "", const std::string& w2_sbp = "") {
  auto hint = [](const std::string& sbp) { return sbp.empty() ? std::string() : ", \"sbp\": \"" + sbp + "\""; };
  auto job = graph::parse_job_json(R"({
    "name": "dropout_mlp",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": 1024, "num_classes": 10,
                  "feature_shape": [32], "seed": 5},
                 {"name": "held", "kind": "synthetic", "num_samples": 256, "num_classes": 10,
                  "feature_shape": [32], "seed": 6}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [32]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [{"name": "w1", "shape": [32, 48], "init": {"type": "xavier_uniform", "seed": 1})" + hint(w1_sbp) + R"(},
                  {"name": "b1", "shape": [48])" + hint(b1_sbp) + R"(},
                  {"name": "w2", "shape": [48, 10], "init": {"type": "xavier_uniform", "seed": 2})" + hint(w2_sbp) + R"(}],
    "ops": [{"name": "fc1", "type": "matmul", "inputs": ["x", "w1"]},
            {"name": "fc1_b", "type": "bias_add", "inputs": ["fc1", "b1"]},
            {"name": "h1", "type": "relu", "inputs": ["fc1_b"]},
            {"name": "drop", "type": "dropout", "inputs": ["h1"], "attrs": {"rate": 0.4, "seed": 3}},
            {"name": "logits", "type": "matmul", "inputs": ["drop", "w2"]},
            {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
            {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
    "loss": "loss",
    "optimizer": {"type": "sgd", "lr": 0.5},
    "train": {"steps": 10, "batch_size": 64, "shuffle": false},
    "eval": {"dataset": "held", "batch_size": 64}
  })", "dropout_mlp.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

double worst_difference(const std::map<std::string, VariableValue>& a, const std::map<std::string, VariableValue>& b) {
  double worst = 0;
  for (const auto& [name, value] : a) {
    const std::vector<float>& other = b.at(name).values;
    REQUIRE(other.size() == value.values.size());
    for (size_t i = 0; i < other.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::abs(value.values[i] - other[i])));
  }
  return worst;
}

TEST_CASE("dropout trains alike on 1, 2 and 3 devices, split by columns, in micro-batches and on 2 nodes") {
  // Each layout sums the same products in another order: float rounding
  // (about 1e-7 of weights of magnitude 1 per step) over 10 steps stays
  // under 1e-5. A mask that depended on the layout would drop other
  // elements: a whole term of about 0.1 per weight.
  const JobResult one = testing::run(dropout_mlp(), "cpu:1");
  REQUIRE_MESSAGE(one.status.ok(), one.status.to_string());
  graph::Job no_dropout = dropout_mlp();
  for (graph::Op& op : no_dropout.ops)
    if (op.type == "dropout") op.attrs.set("rate", 0.0);
  const JobResult kept = testing::run(no_dropout, "cpu:1");
  REQUIRE(kept.status.ok());
  CHECK(worst_difference(one.variables, kept.variables) > 1e-2);  // the masks matter

  struct Layout {
    std::string what;
    graph::Job job;
    const char* devices;
  };
  graph::Job micro = dropout_mlp();
  micro.train.micro_batches = 4;
  const Layout layouts[] = {{"data parallel, 2 devices", dropout_mlp(), "cpu:2"},
                            {"data parallel, 3 devices", dropout_mlp(), "cpu:3"},
                            {"Megatron, 2 devices", dropout_mlp("S(1)", "S(0)", "S(0)"), "cpu:2"},
                            {"4 micro-batches, 2 devices", micro, "cpu:2"}};
  for (const Layout& layout : layouts) {
    CAPTURE(layout.what);
    const JobResult run = testing::run(layout.job, layout.devices);
    REQUIRE_MESSAGE(run.status.ok(), run.status.to_string());
    CHECK(worst_difference(one.variables, run.variables) < 1e-5);
    CHECK(std::abs(one.final_loss - run.final_loss) < 1e-5);
  }
  // 2 nodes x cpu:2, in-process: each node holds the replicated weights.
  auto cluster = compiler::parse_devices("cpu:2", 2);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(dropout_mlp(), *cluster, {});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  for (const RunReport& node : testing::run_nodes(*plan, 2, [](RunOptions&) {}))
    CHECK(worst_difference(one.variables, node.variables) < 1e-5);
}

TEST_CASE("dropout in the mirrored view: 2 micro-batches per rank drop as the rank's whole batch does") {
  // Each rank reads its own rows; its micro-batches continue its count
  // after the ranks before it, so the masks are those of the run without
  // micro-batches (and no rank's micro-batch repeats another's mask).
  graph::Job whole = dropout_mlp();
  whole.train.view = graph::View::kMirrored;
  whole.train.batch_size = 32;  // rows per rank
  graph::Job micro = whole;
  micro.train.micro_batches = 2;
  const JobResult a = testing::run(whole, "cpu:2"), b = testing::run(micro, "cpu:2");
  REQUIRE_MESSAGE(a.status.ok(), a.status.to_string());
  REQUIRE_MESSAGE(b.status.ok(), b.status.to_string());
  CHECK(worst_difference(a.variables, b.variables) < 1e-5);
}

TEST_CASE("an eval plan runs dropout as identity") {
  graph::Job job = dropout_mlp();
  auto cluster = compiler::parse_devices("cpu:1", 1);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {.mode = compiler::Mode::kEval});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  const plan::Plan* p = plan::GetPlan(plan->data());
  int identities = 0;
  for (const plan::Task* t : *p->tasks()) {
    CHECK(t->op_type()->str() != "dropout");
    identities += t->op_type()->str() == "identity";
  }
  CHECK(identities == 1);
}

}  // namespace
}  // namespace rill
