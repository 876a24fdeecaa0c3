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
// The analysis answers without a table of every pair of acts (which grew
// as the square of the node's tasks). In a topological order of the graph
// (compiler/unrolled_acts.h: step by step, task by task) the starts of a
// thread's productions are ranked; for every act, the ranks after it of
// the starts it does not precede are kept as ascending runs, each act's
// found from its successors' by intersection (few runs where what a step
// makes comes together in the order). A production x is live with the
// starts ranked from its own to the last of its readers' last reads, and
// with those each reader's last read does not precede: live(x), a few
// runs. A production whose start is ranked at or after x's is acked after
// x exactly when that rank is outside live(x), so two slots may be live
// at once exactly when a start of one of their productions falls in
// live() of one of the other's. memory_plan packs and checks slots by that
// (compiler/slot_packing.h) without listing pairs: those grow as the
// square of the layers wherever forward values wait for the backward.
// tests/compiler/memory_plan_reference_test.cc holds both the relation
// and apart to the test over every pair by plain reachability.
//
// Pure; the analysis of a node plan and of the whole plan for that node
// agree (both see the node's tasks and the full consumer lists of the
// regsts they write).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/plan_generated.h"

namespace rill::compiler {

struct UnrolledActs;

class RegstLifetimes {
 public:
  // Node `node`'s regsts in a verified plan (whole or node plan).
  static RegstLifetimes analyze(const plan::Plan& plan, int node);

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

  // Every shareable slot as a unit, numbered from 0: slot `slot` of the
  // regst at `index` is unit(index, slot).
  int unit(int index, int slot) const { return infos_[static_cast<size_t>(index)].first_unit + slot; }
  int units() const { return static_cast<int>(unit_index_.size()); }
  // A unit's regst and slot.
  std::pair<int64_t, int> slot_of(int unit) const;
  // The starts of a thread's productions are ranked 0 .. ranks(thread) - 1.
  uint32_t ranks(uint64_t thread) const;
  struct Run {
    uint32_t begin, end;  // ranks [begin, end)
  };
  // A production: its start's rank and live(), ascending runs (the first
  // begins at the start).
  struct Live {
    uint32_t start;
    std::span<const Run> runs;
  };
  // Unit `unit`'s productions of two periods, in order.
  int productions(int unit) const;
  Live production(int unit, int k) const;
  // Units of work the analysis took: acts and orders of the unrolled
  // graph, runs made and merged; grows as the node's tasks times their
  // runs (tests/compiler/plan_scale_test.cc).
  int64_t work() const { return work_; }

 private:
  struct Production {
    uint32_t start = 0;               // its first write's rank among its thread's starts
    uint32_t first_run = 0, runs = 0;  // live(): runs_[first_run, first_run + runs)
  };
  struct Info {
    int64_t regst = 0;
    uint64_t thread = 0;
    int slots = 0;
    int first_unit = 0;
    uint32_t first_production = 0, productions = 0;  // production n of two periods in slot n % slots
  };
  class ThreadPass;

  bool before(const Production& a, const Production& b) const;

  std::vector<Info> infos_;
  std::unordered_map<int64_t, int> index_;  // regst id -> position in infos_
  std::vector<int> unit_index_;             // unit -> position in infos_
  std::vector<Production> productions_;
  std::vector<Run> runs_;
  std::map<uint64_t, uint32_t> ranks_;  // by thread
  int64_t work_ = 0;
};

}  // namespace rill::compiler
