// Plans for cuda devices: compute and variables on the GPU, a Copy task
// wherever a regst changes memory zone, node by node on several nodes, and
// micro-batches. Built where nvcc is (a build without CUDA refuses cuda
// devices when parsing them: compiler_test.cc).
#include <doctest/doctest.h>

#include <algorithm>

#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

#ifdef RILL_WITH_CUDA

using testing::compile_ok;
using testing::plan_of;
using testing::task_named;
using testing::tasks_of_kind;

TEST_CASE("cuda:1: compute and variables on the GPU, a copy wherever a regst changes memory, each regst placed") {
  graph::Job job = testing::linear_regression_job();
  std::string bytes = compile_ok(job, "cuda:1");
  const plan::Plan& p = *plan_of(bytes);
  auto copies = tasks_of_kind(p, plan::TaskKind::Copy);
  CHECK(copies.size() == 3);  // x and y in, the loss out to the sink
  for (const plan::Task* t : *p.tasks()) {
    CAPTURE(t->name()->str());
    const bool on_gpu = ActorId::device_type(t->id()) == DeviceType::kCuda;
    switch (t->kind()) {
      case plan::TaskKind::Compute:
      case plan::TaskKind::Variable:
        CHECK(on_gpu);
        for (int64_t r : *t->inputs()) CHECK(compiler::find_regst(p, r)->device() == 0);
        for (int64_t r : *t->outputs()) CHECK(compiler::find_regst(p, r)->device() == 0);
        break;
      case plan::TaskKind::Copy: {
        CHECK(on_gpu);  // on the device's thread, whichever way it copies
        const int from = compiler::find_regst(p, t->inputs()->Get(0))->device();
        const int to = compiler::find_regst(p, t->outputs()->Get(0))->device();
        CHECK(((from == -1 && to == 0) || (from == 0 && to == -1)));
        break;
      }
      default:  // sources and the sink stay on the host, reading and writing host memory
        CHECK_FALSE(on_gpu);
        for (int64_t r : *t->inputs()) CHECK(compiler::find_regst(p, r)->device() == -1);
        for (int64_t r : *t->outputs()) CHECK(compiler::find_regst(p, r)->device() == -1);
    }
  }
  // On cpu devices nothing is copied and everything is in host memory.
  std::string cpu = compile_ok(job, "cpu:2");
  CHECK(tasks_of_kind(*plan_of(cpu), plan::TaskKind::Copy).empty());
  for (const plan::RegstDesc* r : *plan_of(cpu)->regsts()) CHECK(r->device() == -1);
}

TEST_CASE("cuda:2 on 2 nodes: each node compiles its own plan, with its own copies after every other id") {
  const std::string whole = compile_ok(testing::mlp_job(), "cuda:2", {}, 2);  // and node by node
  auto cluster = compiler::parse_devices("cuda:2", 2);
  REQUIRE(cluster.ok());
  for (int node = 0; node < 2; ++node) {
    CAPTURE(node);
    compiler::CompileOptions alone;
    alone.node = node;
    auto own = compiler::compile(testing::mlp_job(), *cluster, alone);
    REQUIRE(own.ok());
    auto cut = compiler::node_plan(whole, node);
    REQUIRE(cut.ok());
    const plan::Plan& mine = *plan_of(*own);
    const plan::Plan& theirs = *plan_of(*cut);
    REQUIRE(mine.tasks()->size() == theirs.tasks()->size());
    int copies = 0;
    uint32_t last = 0;  // the highest index of the other tasks
    for (const plan::Task* t : *mine.tasks())
      if (t->kind() != plan::TaskKind::Copy) last = std::max(last, ActorId::index(t->id()));
    for (const plan::Task* t : *mine.tasks()) {
      CAPTURE(t->name()->str());
      const plan::Task* same = task_named(theirs, t->name()->str());
      REQUIRE(same != nullptr);
      if (t->kind() == plan::TaskKind::Copy) {
        ++copies;
        CHECK(ActorId::index(t->id()) > last);
        continue;
      }
      CHECK(t->id() == same->id());  // Send/Recv pairs and peers agree across nodes
    }
    CHECK(copies > 0);
  }
}

// Gradient accumulation on GPUs: the weight gradient's matmul accumulates in
// device memory (beta = 1 after the first micro-batch), so the plan is the
// CPU's with copies: the sources and the sink act once per micro-batch, so
// do the copies between them and the GPU, and the variables once a step.
TEST_CASE("micro-batches on cuda devices: the copies keep the micro-batches' pace") {
  graph::Job micro = testing::mlp_job(16, 8);
  micro.train.micro_batches = 4;
  const std::string bytes = compile_ok(micro, "cuda:1");
  const plan::Plan& p = *plan_of(bytes);
  CHECK(p.micro_batches() == 4);
  int copies = 0;
  for (const plan::Task* t : *p.tasks()) {
    CAPTURE(t->name()->str());
    if (t->kind() == plan::TaskKind::Copy) {
      ++copies;
      const bool of_model = compiler::find_regst(p, t->inputs()->Get(0))->readies_per_step() == 1;
      CHECK(t->acts_per_step() == (of_model ? 1 : 4));
    }
    if (t->kind() == plan::TaskKind::Variable) CHECK(t->acts_per_step() == 1);
    if (t->kind() == plan::TaskKind::Source || t->kind() == plan::TaskKind::Sink) CHECK(t->acts_per_step() == 4);
  }
  CHECK(copies > 0);
}

#endif

}  // namespace
}  // namespace rill
