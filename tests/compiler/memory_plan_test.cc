// Memory planning (compiler/memory_plan.h): every regst a node reads or
// writes gets its slots in its zone's block, none overlapping; the blocks
// add up what the plan and the bodies need; a layout that overlaps is
// caught by the check.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "compiler/boxing_task.h"
#include "compiler/memory_plan.h"
#include "kernels/op.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using compiler::MemoryPlan;
using compiler::MemoryZone;

MemoryPlan planned(const plan::Plan& p, int node) {
  auto memory = compiler::plan_memory(p, node);
  REQUIRE_MESSAGE(memory.ok(), memory.status().to_string());
  REQUIRE_MESSAGE(compiler::check_memory_plan(p, node, *memory).ok(), compiler::check_memory_plan(p, node, *memory).to_string());
  return *memory;
}

// Every regst a task of `node` names, once.
std::set<int64_t> regsts_of(const plan::Plan& p, int node) {
  std::set<int64_t> ids;
  for (const plan::Task* t : *p.tasks())
    if (t->node() == node) {
      ids.insert(t->inputs()->begin(), t->inputs()->end());
      ids.insert(t->outputs()->begin(), t->outputs()->end());
    }
  return ids;
}

TEST_CASE("each node's regsts get slots in one host block, none overlapping, adding up to the block") {
  // With zero, the gradients are reduce-scattered across the nodes: their
  // collectives keep partial sums, in the boxing's scratch.
  for (bool zero : {false, true}) {
    CAPTURE(zero);
    graph::Job job = testing::mlp_job(16, 8);
    job.optimizer.type = "adam";
    job.train.reuse_memory = false;  // every slot its own bytes (sharing: tests/compiler/regst_lifetimes_test.cc)
    job.train.zero = zero;
    const std::string bytes = testing::compile_ok(job, "cpu:2", {}, 2);
    const plan::Plan& p = *testing::plan_of(bytes);
    int reduce_scatters = 0;
    for (int node = 0; node < 2; ++node) {
      CAPTURE(node);
      const MemoryPlan memory = planned(p, node);
      REQUIRE(memory.blocks.size() == 1);
      CHECK(memory.blocks[0].zone == MemoryZone{MemoryZone::kHost, -1});
      const std::set<int64_t> ids = regsts_of(p, node);
      CHECK(memory.regsts.size() == ids.size());
      int64_t slots = 0, state = 0;
      for (int64_t id : ids) {
        const plan::RegstDesc* r = testing::regst(p, id);
        const compiler::RegstMemory& m = memory.regsts.at(id);
        CHECK(m.slots == r->register_num());
        CHECK(m.slot_size >= r->bytes());
        CHECK(m.slot_size % 64 == 0);
        for (int64_t offset : m.offsets) CHECK(offset % 64 == 0);
        slots += m.slot_size * m.slots;
      }
      CHECK(memory.blocks[0].slot_bytes == slots);
      CHECK(memory.slots_sum(0) == slots);
      // Adam keeps two tensors the size of each variable piece this node
      // updates, after the slots in the same block, one region per variable.
      std::vector<std::pair<int64_t, int64_t>> regions;
      for (const plan::Task* t : *p.tasks())
        if (t->node() == node && t->kind() == plan::TaskKind::Variable && t->variable()->update_op()) {
          const int64_t tensor = compiler::slot_size(testing::regst(p, t->outputs()->Get(0))->bytes());
          state += 2 * tensor;
          REQUIRE(memory.states.count(t->id()) == 1);
          const compiler::StateMemory& st = memory.states.at(t->id());
          CHECK(st.block == 0);
          CHECK(st.tensors == 2);
          CHECK(st.tensor_bytes == tensor);
          CHECK(st.offset >= slots);
          regions.emplace_back(st.offset, st.offset + 2 * tensor);
        }
      CHECK(state > 0);
      CHECK(memory.states.size() == regions.size());
      std::sort(regions.begin(), regions.end());
      for (size_t i = 1; i < regions.size(); ++i) CHECK(regions[i].first >= regions[i - 1].second);
      CHECK(regions.back().second == slots + state);
      CHECK(memory.blocks[0].state_bytes == state);
      CHECK(memory.blocks[0].held_bytes == 0);
      // Then each boxing task's scratch, as big as the plan it runs needs
      // (across the 2 nodes: the gradients' all-reduce buffers).
      int64_t boxing = 0;
      for (const plan::Task* t : *p.tasks())
        if (t->node() == node && t->kind() == plan::TaskKind::Boxing) {
          auto work = compiler::boxing_task(p, *t);
          REQUIRE(work.ok());
          const auto bytes = static_cast<int64_t>(work->plan.scratch_bytes());
          if (bytes == 0) {
            CHECK(memory.boxing.count(t->id()) == 0);
            continue;
          }
          REQUIRE(memory.boxing.count(t->id()) == 1);
          const compiler::ScratchMemory& sc = memory.boxing.at(t->id());
          CHECK(sc.bytes == bytes);
          // A reduce-scatter's partial sums of its whole input follow the
          // task's buffers (base/collective_scratch.h).
          if (work->plan.exchange == BoxingPlan::Exchange::kReduceScatter) {
            ++reduce_scatters;
            CHECK(work->plan.exchange_scratch_bytes() == work->plan.exchange_in_bytes);
            CHECK(sc.bytes >= static_cast<int64_t>(work->plan.send_bytes + work->plan.recv_bytes +
                                                   work->plan.exchange_in_bytes));
          }
          CHECK(sc.offset >= slots + state);
          boxing += compiler::slot_size(bytes);
        }
      CHECK(boxing > 0);
    // A boxing task given one byte less scratch than it runs with is refused.
    MemoryPlan short_scratch = memory;
    short_scratch.boxing.begin()->second.bytes -= 1;
    const Status refused = compiler::check_memory_plan(p, node, short_scratch);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.message().find("boxing scratch") != std::string::npos);
      CHECK(memory.blocks[0].boxing_bytes == boxing);
      CHECK(memory.blocks[0].scratch_bytes == 0);  // an MLP's CPU kernels take no scratch
      CHECK(memory.blocks[0].block_bytes() == slots + state + boxing);
      CHECK(memory.blocks[0].total() == slots + state + boxing);
    }
    CHECK((reduce_scatters > 0) == zero);
  }
}

TEST_CASE("a layout whose slots overlap or leave their block is refused, naming the regsts") {
  graph::Job job = testing::mlp_job();
  job.optimizer.type = "adam";
  const std::string bytes = testing::compile_ok(job, "cpu:1");
  const plan::Plan& p = *testing::plan_of(bytes);
  MemoryPlan memory = planned(p, 0);
  REQUIRE(memory.regsts.size() >= 2);
  auto first = memory.regsts.begin();
  auto second = std::next(first);
  MemoryPlan overlapping = memory;
  overlapping.regsts[second->first].offsets[0] = first->second.offsets[0];  // two regsts on the same bytes
  Status refused = compiler::check_memory_plan(p, 0, overlapping);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("overlap") != std::string::npos);
  MemoryPlan outside = memory;
  outside.regsts[first->first].offsets[0] = memory.blocks[0].slot_bytes;
  refused = compiler::check_memory_plan(p, 0, outside);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("outside its block") != std::string::npos);
  // Optimizer state on the slots, or two variables' state on the same bytes.
  REQUIRE(memory.states.size() >= 2);
  MemoryPlan on_slots = memory;
  on_slots.states.begin()->second.offset = 0;
  refused = compiler::check_memory_plan(p, 0, on_slots);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("outside its block's state region") != std::string::npos);
  MemoryPlan shared_state = memory;
  std::next(shared_state.states.begin())->second.offset = shared_state.states.begin()->second.offset;
  refused = compiler::check_memory_plan(p, 0, shared_state);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("the optimizer state of tasks") != std::string::npos);
}

#if RILL_WITH_CUDA
// On a GPU: what its tasks write lives in its memory (with the optimizer
// state of its variables); host slots a copy reads or writes are
// page-locked; the rest (here none: sources and the sink only meet the GPU
// through copies) is plain host memory.
TEST_CASE("on cuda:1 the GPU's regsts and optimizer state are its block, the copies' host ends page-locked") {
  graph::Job job = testing::mlp_job(16, 8);
  job.optimizer.type = "momentum";
  const std::string bytes = testing::compile_ok(job, "cuda:1");
  const plan::Plan& p = *testing::plan_of(bytes);
  const MemoryPlan memory = planned(p, 0);
  int device = -1, pinned = -1;
  for (size_t b = 0; b < memory.blocks.size(); ++b) {
    if (memory.blocks[b].zone.kind == MemoryZone::kDevice) device = static_cast<int>(b);
    if (memory.blocks[b].zone.kind == MemoryZone::kPinned) pinned = static_cast<int>(b);
  }
  REQUIRE(device >= 0);
  REQUIRE(pinned >= 0);
  CHECK(memory.blocks[static_cast<size_t>(device)].zone.device == 0);
  CHECK(memory.blocks[static_cast<size_t>(device)].state_bytes > 0);  // momentum's velocity
  for (const auto& [id, m] : memory.regsts) {
    const plan::RegstDesc* r = testing::regst(p, id);
    CAPTURE(r->name()->str());
    if (r->device() >= 0) {
      CHECK(m.block == device);
    } else {
      bool copied = false;  // read or written by a Copy task
      for (const plan::Task* t : testing::tasks_of_kind(p, plan::TaskKind::Copy))
        copied = copied || t->inputs()->Get(0) == id || t->outputs()->Get(0) == id;
      CHECK((m.block == pinned) == copied);
    }
  }
}
#endif

}  // namespace
}  // namespace rill
