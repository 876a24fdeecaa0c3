// The GPT sample with its attention fused into one op (kernels/ops/
// attention.cc) in place of matmul, causal softmax and matmul: the same
// model, so 10 steps give the composed form's losses within float rounding,
// on one device and tensor parallel (heads split over 2 devices); and the
// plan holds no [T, T] regst.
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <set>
#include <tuple>

#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "runtime/cluster/job_runner.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

// Each layer's h{i}.scores, h{i}.att and h{i}.y0 become one attention op
// writing h{i}.y0 (and h{i}.lse), with the softmax's scale.
graph::Job fused(graph::Job job) {
  std::vector<graph::Op> ops;
  for (const graph::Op& op : job.ops) {
    const size_t dot = op.name.find('.');
    const std::string layer = op.name.substr(0, dot), part = dot == std::string::npos ? "" : op.name.substr(dot + 1);
    if (part == "scores" || part == "y0") continue;
    if (part == "att") {
      graph::Op attention{layer + ".y0", "attention", {layer + ".q", layer + ".k", layer + ".v"},
                          {layer + ".y0", layer + ".lse"}, {}, {}, {}};
      attention.attrs.set("causal", int64_t{1});
      attention.attrs.set("scale", op.attrs.get_float("scale", 1.0));
      ops.push_back(attention);
      continue;
    }
    ops.push_back(op);
  }
  job.ops = std::move(ops);
  return job;
}

graph::Job sample(const char* file) {
  graph::Job job = testing::training_sample(file);
  job.train.shuffle = false;
  return job;
}

// The bound, as tests/torch/gpt_torch_check.py derives it: both forms sum
// in float32 in different orders (the fused form a row of scores at a time,
// the composed one by OpenBLAS's blocking), so each loss differs by float
// rounding, about sqrt(n) 6e-8 for sums of n terms (n up to 512), and 10
// AdamW steps compound it only along directions the loss is flat in. 2e-5
// relative is the worst case for one sum; a wrong gradient moves the loss
// by 1e-3 within 3 steps.
TEST_CASE("the GPT sample with fused attention follows the composed form over 10 steps, and plans no [T, T] regst") {
  for (const auto& [file, devices] : {std::pair{"samples/gpt/gpt_moby.json", "cpu:1"},
                                      std::pair{"samples/gpt/gpt_moby_tp.json", "cpu:2"}}) {
    CAPTURE(file);
    const graph::Job composed = sample(file);
    const graph::Job one_op = fused(composed);
    REQUIRE(one_op.ops.size() + 2 * 4 == composed.ops.size());  // 4 layers, 3 ops each become 1
    JobResult a = testing::run(composed, devices, 10);
    JobResult b = testing::run(one_op, devices, 10);
    REQUIRE_MESSAGE(a.status.ok(), a.status.to_string());
    REQUIRE_MESSAGE(b.status.ok(), b.status.to_string());
    REQUIRE(a.loss_curve.size() == 10);
    REQUIRE(b.loss_curve.size() == 10);
    for (size_t i = 0; i < 10; ++i) {
      CAPTURE(i);
      CHECK(std::abs(a.loss_curve[i] - b.loss_curve[i]) <= 2e-5 * std::abs(a.loss_curve[i]));
    }
  }
  // No regst of the fused plan ends in [T, T] (T = 128).
  auto cluster = compiler::parse_devices("cpu:1", 1);
  REQUIRE(cluster.ok());
  auto bytes = compiler::compile(fused(sample("samples/gpt/gpt_moby.json")), *cluster, {});
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  const plan::Plan* plan = plan::GetPlan(bytes->data());
  for (const plan::RegstDesc* r : *plan->regsts()) {
    const auto* shape = r->shape();
    const bool square = shape && shape->size() >= 2 && shape->Get(shape->size() - 1) == 128 &&
                        shape->Get(shape->size() - 2) == 128 && shape->size() == 4;
    CHECK_MESSAGE(!square, r->name()->str());
  }
}

// Its CPU kernels take a row of scores (T floats) of compute scratch: one
// region per thread in the host block, which the thread's attention and
// attention_grad tasks take in turn; two threads' regions never meet.
TEST_CASE("the fused attention's compute scratch: one region per thread in the plan's host block") {
  for (const auto& [file, devices, threads] : {std::tuple{"samples/gpt/gpt_moby.json", "cpu:1", 1},
                                               std::tuple{"samples/gpt/gpt_moby_tp.json", "cpu:2", 2}}) {
    CAPTURE(file);
    auto cluster = compiler::parse_devices(devices, 1);
    REQUIRE(cluster.ok());
    auto bytes = compiler::compile(fused(sample(file)), *cluster, {});
    REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
    const plan::Plan& plan = *plan::GetPlan(bytes->data());
    auto memory = compiler::plan_memory(plan, 0);
    REQUIRE_MESSAGE(memory.ok(), memory.status().to_string());
    REQUIRE(compiler::check_memory_plan(plan, 0, *memory).ok());
    std::set<std::pair<uint64_t, int64_t>> regions;  // (thread, offset)
    int tasks = 0;
    for (const plan::Task* t : *plan.tasks()) {
      if (t->kind() != plan::TaskKind::Compute || t->scratch_bytes() == 0) continue;
      const std::string op = t->op_type()->str();
      CHECK((op == "attention" || op == "attention_grad"));
      CHECK(t->scratch_bytes() == 128 * 4);  // a row of T = 128 scores
      REQUIRE(memory->compute.count(t->id()) == 1);
      const compiler::ScratchMemory& sc = memory->compute.at(t->id());
      CHECK(sc.bytes >= t->scratch_bytes());  // its thread's region: the most any of its tasks needs
      regions.insert({ActorId::thread_key(t->id()), sc.offset});
      ++tasks;
    }
    CHECK(tasks == 2 * 4 * threads);  // forward and gradient of 4 layers on each device
    CHECK(regions.size() == static_cast<size_t>(threads));
    const compiler::MemoryBlock& host = memory->blocks[0];
    CHECK(host.scratch_bytes == threads * 128 * 4);
    CHECK(host.block_bytes() == host.slot_bytes + host.state_bytes + host.boxing_bytes + host.scratch_bytes);
    for (const auto& [thread, offset] : regions) CHECK(offset >= host.block_bytes() - host.scratch_bytes);
    // A task left without its scratch, or with less than it needs, is refused.
    compiler::MemoryPlan missing = *memory;
    missing.compute.erase(missing.compute.begin());
    Status refused = compiler::check_memory_plan(plan, 0, missing);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.message().find("has none") != std::string::npos);
    compiler::MemoryPlan small = *memory;
    for (auto& [task, sc] : small.compute) sc.bytes = 4;
    refused = compiler::check_memory_plan(plan, 0, small);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.message().find("compute scratch") != std::string::npos);
    if (threads == 2) {
      // One thread's task put on the other's region is refused.
      compiler::MemoryPlan moved = *memory;
      auto a = moved.compute.begin();
      auto b = std::find_if(moved.compute.begin(), moved.compute.end(), [&](const auto& e) {
        return ActorId::thread_key(e.first) != ActorId::thread_key(a->first);
      });
      REQUIRE(b != moved.compute.end());
      a->second.offset = b->second.offset;
      const Status refused = compiler::check_memory_plan(plan, 0, moved);
      REQUIRE_FALSE(refused.ok());
      CHECK(refused.message().find("compute scratch") != std::string::npos);
    }
  }
}

// bias_add + gelu_tanh fused by the compiler (compiler/fusion.h) computes
// each element as the pair does, so the GPT sample trains bit for bit as
// with the pair (kept apart here by fetching each layer's sum).
TEST_CASE("the GPT sample with bias_add and gelu_tanh fused trains bit for bit as with them apart") {
  graph::Job fused = sample("samples/gpt/gpt_moby.json");
  fused.train.batch_size = 4;
  graph::Job apart = fused;
  for (int layer = 0; layer < 4; ++layer) apart.fetch.push_back(fmt::format("h{}.fc", layer));
  JobResult a = testing::run(fused, "cpu:1", 5);
  REQUIRE_MESSAGE(a.status.ok(), a.status.to_string());
  JobResult b = testing::run(apart, "cpu:1", 5);
  REQUIRE_MESSAGE(b.status.ok(), b.status.to_string());
  REQUIRE(a.loss_curve.size() == 5);
  CHECK(a.loss_curve == b.loss_curve);
  for (const auto& [name, value] : a.variables) CHECK(value.values == b.variables.at(name).values);
}

}  // namespace
}  // namespace rill
