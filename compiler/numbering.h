// Numbering: where the physical expander puts what it makes. Every task and
// regst of the cluster gets its global number in one fixed order (the
// expander's), on every node alike; a graph built for one node stores only
// what that node runs and counts the rest (compiler/task_graph.h). Passes
// say what they make, and where; whether it is stored or only counted is
// this class's business, so a new kind of task is numbered right without
// knowing about per-node plans. Internal to the compiler; one per expand().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/task_graph.h"

namespace rill::compiler {

class Numbering {
 public:
  explicit Numbering(TaskGraph& graph) : g_(graph) {}

  // A task in the numbering: its actor id, its handle in the graph (-1 when
  // another node runs it and it is only counted), and whether the graph is
  // its node's (or the whole plan).
  struct Task {
    uint64_t id = 0;
    int handle = -1;
    bool home = false;
    bool stored() const { return handle >= 0; }
  };

  // Numbers a task on `node`, on the thread (`type`, `device`); it is stored
  // as `build()` makes it when the graph holds `node`, or `everywhere` (a
  // task that reads across nodes: every node must know its readers).
  template <typename Build>
  Task task(int node, DeviceType type, uint32_t device, bool everywhere, Build&& build) {
    const bool home = g_.stores(node);
    if (!home && !everywhere) return {g_.count_task(node, type, device), -1, false};
    TaskNode made = build();
    made.node = node;
    const int handle = g_.add_task(std::move(made), type, device);
    return {g_.tasks[static_cast<size_t>(handle)].id, handle, home};
  }

  // A regst written by `task`, as `build()` makes it when the task is
  // stored. Its reference: the handle (>= 0), or ~index of a counted regst,
  // which a reader stores on first use (resolve). `sbp` and `is_model` are
  // what a counted regst keeps of it (the producer's SBP).
  template <typename Build>
  int64_t regst(const Task& task, const NdSbp& sbp, bool is_model, Build&& build) {
    if (task.stored()) return g_.add_regst(build(), task.handle);
    counted_.push_back({g_.next_regst++, task.id, sbp, is_model});
    return ~static_cast<int64_t>(counted_.size() - 1);
  }

  // A control regst (its bytes unused) ordering `task` before its readers
  // on its node: stored as `build()` makes it in the graph of that node (a
  // task stored everywhere is read across nodes for its data, never for its
  // order), else only counted. The handle, or -1.
  template <typename Build>
  int ctrl_regst(const Task& task, Build&& build) {
    if (task.home) return g_.add_regst(build(), task.handle);
    ++g_.next_regst;
    return -1;
  }

  // The handle of reference `ref`: a counted regst is stored now, once, as
  // `stub()` makes it (a piece as its reader sees it), with no producer task
  // but its producer's id, node and SBP.
  template <typename Stub>
  int resolve(int64_t ref, Stub&& stub) {
    if (ref >= 0) return static_cast<int>(ref);
    auto [it, fresh] = stored_.try_emplace(ref, -1);
    if (!fresh) return it->second;
    const Counted& c = counted_[static_cast<size_t>(~ref)];
    RegstNode r = stub();
    r.id = c.id;
    r.node = static_cast<int>(ActorId::node(c.producer_id));
    r.producer_id = c.producer_id;
    r.sbp = c.sbp;
    r.is_model = c.is_model;
    g_.regsts.push_back(std::move(r));
    it->second = static_cast<int>(g_.regsts.size() - 1);
    return it->second;
  }

  void reserve_counted(size_t n) {
    if (g_.node >= 0) counted_.reserve(n);
  }

 private:
  struct Counted {
    int64_t id;
    uint64_t producer_id;
    NdSbp sbp;
    bool is_model;
  };
  TaskGraph& g_;
  std::vector<Counted> counted_;
  std::map<int64_t, int> stored_;  // counted reference -> its handle, once stored
};

}  // namespace rill::compiler
