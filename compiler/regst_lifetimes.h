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
// A regst of r slots writes production n into slot n % r, so its slots
// repeat every P = lcm(r, readies per step) / (readies per step) steps; the
// unit that may share bytes is one slot. The analysis unrolls the node's
// acts over 2 P + 1 steps (P the largest period of a shareable regst) into
// a graph of those orders, and calls two slots apart when all their
// productions in the first 2 P steps form one chain: each acked by every
// reader before the next production's first write begins. That holds for
// every step: no edge goes back a step and every edge between steps s and
// s' exists for every s >= 0, so the graph over a window starting later
// holds the first window's orders (and perhaps more), and the chain's pairs
// repeat every P steps.
//
// On a GPU's thread an act enqueues work; the same relation orders the work
// itself, because every compute and variable body of a device thread reads
// and writes its slots only on that device's compute stream (copies run on
// the copy stream, and the compute stream waits for each; messages to other
// threads are held until the work is done: runtime/node/worker.h). A body
// that touched its slots on another stream, or from the host, would break
// sharing: keep that invariant (actor/body.h).
//
// Only regsts written by a compute task and read only by compute or
// variable tasks of the producer's thread, whose slots repeat within 4
// steps, may share. A model regst (the variable between steps) and what
// crosses threads, nodes or a copy keep bytes of their own. Tasks outside the actor protocol's plain
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
  RegstLifetimes() = default;
  // Moves keep each Info's pointer into reach_ (a map's nodes stay put); a copy would not.
  RegstLifetimes(RegstLifetimes&&) = default;
  RegstLifetimes& operator=(RegstLifetimes&&) = default;
  RegstLifetimes(const RegstLifetimes&) = delete;
  RegstLifetimes& operator=(const RegstLifetimes&) = delete;

  // Whether `regst`'s slots may share bytes with other slots of its thread.
  bool shareable(int64_t regst) const { return index_.contains(regst); }
  // A shareable regst's slots (0 for others).
  int slots(int64_t regst) const;
  // The device thread of a shareable regst (its producer's ActorId thread key).
  uint64_t thread_of(int64_t regst) const { return infos_[static_cast<size_t>(index_.at(regst))].thread; }
  // Whether slot `slot_a` of regst `a` and slot `slot_b` of regst `b`
  // (shareable, of one thread) are never live at once.
  bool apart(int64_t a, int slot_a, int64_t b, int slot_b) const;
  // Regsts of one slot.
  bool apart(int64_t a, int64_t b) const { return apart(a, 0, b, 0); }
  // The same by a shareable regst's index (-1 for others), for callers that
  // ask about many pairs.
  int index(int64_t regst) const {
    auto it = index_.find(regst);
    return it == index_.end() ? -1 : it->second;
  }
  bool apart_at(int a, int slot_a, int b, int slot_b) const;

 private:
  struct Production {
    uint32_t start = 0;          // its first write: a target of its thread
    std::vector<uint32_t> ends;  // each reader's last read: rows of its thread
  };
  struct Reach;
  struct Info {
    uint64_t thread = 0;
    std::vector<std::vector<Production>> slots;  // by slot: its productions of two periods, in order
    const Reach* reach = nullptr;                // its thread's
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

  std::vector<Info> infos_;
  std::unordered_map<int64_t, int> index_;  // regst id -> position in infos_
  std::unordered_map<uint64_t, Reach> reach_;
};

}  // namespace rill::compiler
