// Memory planning: where every regst slot of one node lives, as a pure
// function of the plan, so `rill plan`, the plan check and the runtime that
// allocates by it agree byte for byte.
//
// Each memory zone of a node is one block, allocated once per run: host
// memory, page-locked host memory (the slots a GPU copies from or into, so
// copies run asynchronously), and each GPU's memory. Every regst the node's
// tasks write or read (mirror slots of another node's regsts included) gets
// an offset in its zone's block: register_num slots of its slot size (the
// regst's bytes rounded up to 64), one after the other. With the plan's
// reuse_memory (train.reuse_memory, on by default), slots that are never
// live at once share bytes (compiler/regst_lifetimes.h): each thread's
// shareable slots are packed after the zone's other slots, largest first,
// each at the lowest offset clear of every slot it may be live with.
// check_memory_plan states what must hold.
//
// After the slots, each zone's block holds the optimizer state of the
// variables there (the update op's state tensors, one per variable piece),
// and the host block the boxing tasks' scratch (sized by
// compiler/boxing_task.h as the tasks run it): the runtime allocates each
// block once, and GPU variables keep no host copy of their state (a
// checkpoint stages it for the moment it takes). A boxing task's scratch
// holds its collectives' too (partial sums of a reduce-scatter: base/
// collective_scratch.h). Last, the host block holds each thread's compute
// scratch (CPU kernels'), one region per thread that its tasks take in
// turn. Beside the block each zone counts what bodies hold themselves (a
// laned variable's values). Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "compiler/plan_generated.h"

namespace rill::compiler {

struct MemoryZone {
  enum Kind : uint8_t { kHost, kPinned, kDevice } kind = kHost;
  int device = -1;  // kDevice: the cuda device index
  bool operator==(const MemoryZone&) const = default;
  std::string to_string() const;  // "host", "host (page-locked)", "cuda:0"
};

// A zone's block is [0, slot_bytes) of slots, then the variables' optimizer
// state, then the boxings' scratch, then compute scratch; the runtime
// allocates block_bytes() once. What bodies still hold themselves is
// counted beside it.
struct MemoryBlock {
  MemoryZone zone;
  int64_t slot_bytes = 0;     // every slot placed in the block
  int64_t state_bytes = 0;    // optimizer state of the variables in this zone, after the slots
  int64_t boxing_bytes = 0;   // boxing tasks' buffers and collectives' scratch (host memory), after the state
  int64_t scratch_bytes = 0;  // compute scratch (host memory), one region per thread, after the boxings'
  int64_t held_bytes = 0;     // kept by bodies themselves: a laned variable's values (and DC-ASGD's)
  int64_t block_bytes() const { return slot_bytes + state_bytes + boxing_bytes + scratch_bytes; }
  int64_t total() const { return block_bytes() + held_bytes; }
};

// One regst's slots: slot s at offsets[s] in block `block` (one after
// another, unless slots share bytes with other regsts' by turns).
struct RegstMemory {
  int block = 0;
  std::vector<int64_t> offsets;
  int64_t slot_size = 0;
  int slots = 0;
};

// A variable's optimizer state: its update op's num_state tensors, tensor i
// at offset + i * tensor_bytes in block `block` (zeroed when allocated).
struct StateMemory {
  int block = 0;
  int64_t offset = 0;
  int64_t tensor_bytes = 0;
  int tensors = 0;
};

// A boxing task's scratch (kernels/boxing_plan.h: send, then receive
// buffer, then its collectives'), or a compute task's (its thread's region,
// `bytes` long: the most the thread's tasks need).
struct ScratchMemory {
  int block = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
};

struct MemoryPlan {
  std::vector<MemoryBlock> blocks;                  // in zone order: host, page-locked, cuda:0, cuda:1, ...
  std::unordered_map<int64_t, RegstMemory> regsts;  // by regst id
  std::unordered_map<uint64_t, StateMemory> states;  // by variable task id (trained variables)
  std::unordered_map<uint64_t, ScratchMemory> boxing;  // by boxing task id (those with scratch)
  std::unordered_map<uint64_t, ScratchMemory> compute;  // by compute task id (those with scratch)
  // The sum of block `block`'s slots' sizes: its slot_bytes where no two
  // slots share bytes, more where slots live at one offset by turns.
  int64_t slots_sum(int block) const {
    int64_t sum = 0;
    for (const auto& [id, m] : regsts)
      if (m.block == block) sum += m.slot_size * m.slots;
    return sum;
  }
};

// The memory of node `node`'s part of a verified plan (whole or node plan).
// Errors: a task names a regst the plan lacks, a regst of register_num < 1,
// sizes past 2^62 bytes. Adds to `work`, when given, the units of work the
// lifetime analysis and the packing took (tests of how planning scales).
StatusOr<MemoryPlan> plan_memory(const plan::Plan& plan, int node, int64_t* work = nullptr);

// OK when every regst's slots lie inside its block and two regsts' slots
// overlap only where the plan reuses memory and the regsts are never live
// at once (RegstLifetimes::apart); every boxing and compute task that needs
// scratch has at least that much in the host block (one region per thread
// for compute, which only its tasks share), optimizer state and scratch
// each in their own region; else an error naming what. `work` as for
// plan_memory.
Status check_memory_plan(const plan::Plan& plan, int node, const MemoryPlan& memory, int64_t* work = nullptr);

// Slot bytes of a regst of `bytes` bytes: rounded up to 64 (at least 64).
inline int64_t slot_size(int64_t bytes) { return bytes <= 0 ? 64 : (bytes + 63) / 64 * 64; }

}  // namespace rill::compiler
