// Regst lifetimes: which of one node's regsts are never live at once, in
// whatever order the workers pick acts, so that memory_plan may give them
// the same bytes.
//
// A slot is live from the start of the act that first writes it for a
// production (an accumulate op writes one over several acts) to the end of
// each consumer's last act reading it (then it is acked). Workers pick
// freely among actors able to act, so the only orders to rely on are those
// the actor protocol makes one act wait for (actor/actor.h):
//   - an actor's acts, one after another;
//   - a consumer's act after the act that readied what it reads (a
//     variable's act n + 1 reads production n of its gradient);
//   - a producer's act after every consumer acked the slot it is about to
//     write: production n's slot is production n - register_num's.
// The analysis unrolls the node's acts over three steps into a graph of
// those orders and calls two regsts apart when all their productions in the
// first two steps form one chain: each slot acked by every reader before the
// next production's first write begins. That is enough for every step: no
// edge goes back a step, so a path between acts of steps s and s + 2 stays
// within them, and the graph over those steps is the same for every s.
//
// On a GPU's thread an act enqueues work; the same relation orders the work
// itself (one compute stream; copies ordered with it by events; messages to
// other threads held until the work is done: runtime/node/worker.h).
//
// Only regsts of one slot, written by a compute task and read only by
// compute or variable tasks of the producer's thread, may share. A model
// regst (the variable between steps) and what crosses threads, nodes or a
// copy keep bytes of their own. Tasks outside the actor protocol's plain
// form (a laned variable picks its port sets itself) add no order.
//
// Pure; the analysis of a node plan and of the whole plan for that node
// agree (both see the node's tasks and the full consumer lists of the
// regsts they write).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "compiler/plan_generated.h"

namespace rill::compiler {

class RegstLifetimes {
 public:
  // Node `node`'s regsts in a verified plan (whole or node plan).
  static RegstLifetimes analyze(const plan::Plan& plan, int node);

  // Whether `regst` may share bytes with another regst of its thread.
  bool shareable(int64_t regst) const { return info_.contains(regst); }
  // The device thread of a shareable regst (its producer's ActorId thread key).
  uint64_t thread_of(int64_t regst) const { return info_.at(regst).thread; }
  // Whether two shareable regsts of one thread are never live at once.
  bool apart(int64_t a, int64_t b) const;

 private:
  struct Production {
    uint32_t start = 0;          // its first write: a target of its thread
    std::vector<uint32_t> ends;  // each reader's last read: rows of its thread
  };
  struct Info {
    uint64_t thread = 0;
    std::vector<Production> productions;  // those of the first two steps, in order
  };
  // Per thread: for each end event (row), the targets it precedes, as bits.
  struct Reach {
    size_t words = 0;
    std::vector<uint64_t> bits;  // rows x words
    bool precedes(uint32_t row, uint32_t target) const {
      return (bits[row * words + target / 64] >> (target % 64)) & 1;
    }
  };
  bool before(const Reach& reach, const Production& a, const Production& b) const;

  std::unordered_map<int64_t, Info> info_;
  std::unordered_map<uint64_t, Reach> reach_;
};

}  // namespace rill::compiler
