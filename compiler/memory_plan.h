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
// reuse_memory (train.reuse_memory, on by default), regsts that are never
// live at once share bytes (compiler/regst_lifetimes.h): each thread's
// shareable regsts are packed after the zone's other slots, largest first,
// each at the lowest offset clear of every member it may be live with.
// check_memory_plan states what must hold.
//
// Beside the slots, each zone counts what the node's bodies allocate
// themselves: optimizer state (the update op's state tensors, one per
// variable piece) and compute scratch. Boxing buffers and the comm
// library's scratch are not counted yet.
// Pure functions; any thread.
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

struct MemoryBlock {
  MemoryZone zone;
  int64_t slot_bytes = 0;     // the block: every slot placed in it
  int64_t state_bytes = 0;    // optimizer state of the variables in this zone
  int64_t scratch_bytes = 0;  // compute scratch (always host memory)
  int64_t total() const { return slot_bytes + state_bytes + scratch_bytes; }
};

// One regst's slots: slot s at offset + s * slot_size in block `block`.
struct RegstMemory {
  int block = 0;
  int64_t offset = 0;
  int64_t slot_size = 0;
  int slots = 0;
};

struct MemoryPlan {
  std::vector<MemoryBlock> blocks;                  // in zone order: host, page-locked, cuda:0, cuda:1, ...
  std::unordered_map<int64_t, RegstMemory> regsts;  // by regst id
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
// sizes past 2^62 bytes.
StatusOr<MemoryPlan> plan_memory(const plan::Plan& plan, int node);

// OK when every regst's slots lie inside its block and two regsts' slots
// overlap only where the plan reuses memory and the regsts are never live
// at once (RegstLifetimes::apart); else an error naming both.
Status check_memory_plan(const plan::Plan& plan, int node, const MemoryPlan& memory);

// Slot bytes of a regst of `bytes` bytes: rounded up to 64 (at least 64).
inline int64_t slot_size(int64_t bytes) { return bytes <= 0 ? 64 : (bytes + 63) / 64 * 64; }

}  // namespace rill::compiler
