// Pipelines in plans: the slots a schedule gives each stage's tensors, and
// pipeline.num_stages cutting the ops into balanced stages (compiler/
// pipeline_cut.h) that equal the groups a user could write.
#include <doctest/doctest.h>

#include <map>

#include "compiler/pipeline_cut.h"
#include "graph/placement.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using testing::compile_ok;
using testing::plan_of;

// deep_mlp_job with 3 layers, layer l on device l of cpu:4 and the output
// layer and loss on device 3: 4 stages, 8 micro-batches.
graph::Job four_stages(const std::string& schedule) {
  auto on = [](int device) { return *graph::parse_placement(fmt::format("cpu 0:{}", device)); };
  graph::Job job = testing::deep_mlp_job(3, 64, 64);
  job.train.micro_batches = 8;
  REQUIRE(graph::parse_mode(schedule, &job.train.schedule));
  for (graph::Op& op : job.ops) {
    const char last = op.name.back();
    op.placement = on(last >= '0' && last <= '2' ? last - '0' : 3);
  }
  for (graph::Variable& v : job.variables) {
    const char last = v.name.back();
    v.placement = on(last >= '0' && last <= '2' ? last - '0' : 3);
  }
  for (graph::Input& in : job.inputs) in.placement = on(in.name == "image" ? 0 : 3);
  return job;
}

TEST_CASE("micro-batch slots: 1F1B gives stage s of S the S - s it holds, GPipe every micro-batch of a step") {
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    CAPTURE(schedule);
    const std::string bytes = compile_ok(four_stages(schedule), "cpu:4");
    const plan::Plan& p = *plan_of(bytes);
    CHECK(p.stages() == 4);
    CHECK(p.schedule()->str() == schedule);
    std::map<std::string, int> slots;  // by tensor (every piece alike)
    std::map<std::string, bool> to_update;
    for (const plan::RegstDesc* r : *p.regsts()) {
      slots[r->name()->str()] = r->register_num();
      to_update[r->name()->str()] = testing::read_only_by_updates(p, *r);
    }
    // The forward tensors of stages 0 to 3 (image is data: stage 0); with
    // the default activation count 2 as the least.
    const std::map<std::string, int> want_1f1b = {{"image", 4}, {"h0", 4}, {"a0", 4}, {"h1", 3}, {"a1", 3},
                                                  {"h2", 2},    {"a2", 2}, {"logits", 2}};
    for (const auto& [tensor, want] : want_1f1b) {
      CAPTURE(tensor);
      CHECK(slots.at(tensor) == (schedule == "1f1b" ? want : 8));
    }
    // Gradients flowing back hold a slot only until the stage before reads
    // them (1F1B); the model and the weights' gradients (read only by their
    // updates) one.
    CHECK(slots.at("w0") == 1);
    if (schedule == "1f1b") {
      for (const auto& [tensor, n] : slots)
        if (tensor.rfind("grad/", 0) == 0) {
          CAPTURE(tensor);
          CHECK(n == (to_update.at(tensor) ? 1 : 2));
        }
    }
  }
  // Without moves between placements the forward pass is one stage.
  graph::Job flat = testing::mlp_job(64, 64);
  flat.train.micro_batches = 8;
  const std::string flat_bytes = compile_ok(flat, "cpu:2");
  const plan::Plan& one = *plan_of(flat_bytes);
  CHECK(one.stages() == 1);
  for (const plan::RegstDesc* r : *one.regsts()) CHECK(r->register_num() <= 2);
}

// The members the cut gives each stage: ops in job order, then inputs and
// variables (each with its first reader).
std::vector<std::vector<std::string>> cut_members(const graph::Job& job, const compiler::Cluster& cluster) {
  auto cut = compiler::cut_stages(job, cluster);
  REQUIRE_MESSAGE(cut.ok(), cut.status().to_string());
  std::vector<std::vector<std::string>> out;
  for (const graph::Group& g : cut->groups) out.push_back(g.members);
  CHECK(cut->pipeline->num_stages == 0);
  CHECK(cut->pipeline->stages.size() == out.size());
  return out;
}

TEST_CASE("balanced_runs: the least largest run, beginning only where allowed, every run non-empty") {
  using compiler::balanced_runs;
  // Runs may not begin at 300: [100] [50 300 10] (largest 360). Packing op
  // by op would keep 50 with 100, overflow at 300 where no run may begin,
  // and settle for [100 50 300] [10] (450).
  CHECK(balanced_runs({100, 50, 300, 10}, {true, true, false, true}, 2) == std::vector<int>{0, 1, 1, 1});
  // Anywhere: [100 50] [300].
  CHECK(balanced_runs({100, 50, 300}, {true, true, true}, 2) == std::vector<int>{0, 0, 1});
  // Too few places for 3 runs: anywhere.
  CHECK(balanced_runs({1, 1, 1}, {true, false, false}, 3) == std::vector<int>{0, 1, 2});
  // Zero costs still give 3 non-empty runs, in order.
  const std::vector<int> zeros = balanced_runs({0, 0, 0, 0, 0}, std::vector<bool>(5, true), 3);
  CHECK(zeros.front() == 0);
  CHECK(zeros.back() == 2);
  for (size_t i = 1; i < zeros.size(); ++i) CHECK(zeros[i] - zeros[i - 1] <= 1);
  // Equal layers of 3 ops each (a weighted op, then two free ones), 4 runs.
  std::vector<int64_t> layers;
  std::vector<bool> starts;
  for (int l = 0; l < 8; ++l) {
    layers.insert(layers.end(), {10, 1, 0});
    starts.insert(starts.end(), {true, false, false});
  }
  const std::vector<int> four = balanced_runs(layers, starts, 4);
  for (size_t i = 0; i < four.size(); ++i) CHECK(four[i] == static_cast<int>(i / 6));
}

TEST_CASE("pipeline.num_stages: the compiler cuts the ops into balanced stages, as groups a user could write") {
  // deep_mlp_job(3): per-op parameter bytes 128 32 0 | 256 32 0 | 256 32 0 96
  // 0 0 0 (fc0 bias0 act0 | fc1 ... | fc2 bias2 act2 fc_out xent mean acc):
  // the least largest stage of 3 is 384 bytes, at the layers' boundaries.
  graph::Job job = testing::deep_mlp_job(3, 64, 64);
  job.train.micro_batches = 2;
  job.pipeline = graph::Pipeline{{}, 3, "params"};
  auto three = *compiler::parse_devices("cpu:1", 3);
  const std::vector<std::vector<std::string>> want = {
      {"fc0", "bias0", "act0", "image", "w0", "b0"},
      {"fc1", "bias1", "act1", "w1", "b1"},
      {"fc2", "bias2", "act2", "fc_out", "xent", "mean", "acc", "label", "w2", "b2", "w_out"}};
  CHECK(cut_members(job, three) == want);
  // The same job with those groups written out compiles to the same plan.
  const std::string cut_plan = compile_ok(job, "cpu:1", {}, 3);
  graph::Job written = job;
  written.pipeline = graph::Pipeline{{"stage0", "stage1", "stage2"}, 0, "params"};
  for (int s = 0; s < 3; ++s)
    written.groups.push_back({fmt::format("stage{}", s), *graph::parse_placement(fmt::format("cpu {}:0", s)),
                              want[static_cast<size_t>(s)]});
  CHECK(compile_ok(written, "cpu:1", {}, 3) == cut_plan);
  CHECK(plan_of(cut_plan)->stages() == 3);
  // Two stage groups on the same devices would count as one stage (and get
  // one stage's 1F1B slots): refused, naming both, written alike or not.
  for (const char* same : {"cpu 1:0", "1:*"}) {
    CAPTURE(same);
    graph::Job doubled = written;
    doubled.groups[2].placement = *graph::parse_placement(same);
    auto refused = compiler::compile(doubled, *compiler::parse_devices("cpu:1", 3), {});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().message() ==
          "compiling job 'mlp': pipeline.stages: 'stage1' and 'stage2' are placed on the same devices (cpu 1:0): "
          "each stage needs devices of its own");
  }

  // By FLOPs (2 M N K a matmul, output elements otherwise; 32-row
  // micro-batches): 2048 256 256 | 4096 256 256 | 4096 256 256 | 1536 32 1 1.
  // Anywhere, the least largest half would be 6690, after fc1 (splitting it
  // from its bias_add); at layer starts it is 7168, before fc2. Two stages
  // on one node split its devices.
  job.pipeline = graph::Pipeline{{}, 2, "flops"};
  auto one_node = *compiler::parse_devices("cpu:4", 1);
  auto halves = cut_members(job, one_node);
  REQUIRE(halves.size() == 2);
  CHECK(halves[0] == std::vector<std::string>{"fc0", "bias0", "act0", "fc1", "bias1", "act1", "image", "w0", "b0",
                                              "w1", "b1"});
  auto cut = compiler::cut_stages(job, one_node);
  CHECK(cut->groups[0].placement.to_string() == "cpu 0:0-1");
  CHECK(cut->groups[1].placement.to_string() == "cpu 0:2-3");

  // Stages need equal parts of the cluster, and an op each.
  job.pipeline = graph::Pipeline{{}, 3, "params"};
  auto bad = compiler::compile(job, *compiler::parse_devices("cpu:2", 2), {});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("pipeline.num_stages 3 divides neither the 2 nodes nor, on one node, its 2 "
                                    "devices") != std::string::npos);
  job.pipeline = graph::Pipeline{{}, 20, "params"};
  auto many = compiler::compile(job, *compiler::parse_devices("cpu:20", 1), {});
  REQUIRE_FALSE(many.ok());
  CHECK(many.status().message().find("pipeline.num_stages 20 is more than the job's 13 ops") != std::string::npos);
}

}  // namespace
}  // namespace rill
