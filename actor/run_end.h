// RunEnd: where a run's steps end, lowered while it runs so that every node
// stops at the same step boundary (an interrupted job: Ctrl-C, SIGTERM).
//
// Only sources and variables begin steps (a source reads a step's data, a
// variable readies the model version a step reads); everything else acts on
// what they send and ends when they send eord. So a run ends early at step E
// when each of them begins no step >= E, and none has begun one already.
// Agreeing on E without a central scheduler:
//   1. hold() on every node: from then on no source or variable begins a
//      step (may_begin() is false); hold() returns the last step the node's
//      sources and variables began.
//   2. E = the largest of those over the nodes, plus one (at most the plan's
//      end; the start itself when no node began any step: nothing runs).
//   3. release(E) on every node: they run on to E, and the run ends there as
//      it would have at the plan's end (eord, last snapshot at step E).
// Why no node has begun a step >= E: may_begin() publishes the step before
// it reads the hold, and hold() sets the hold before it reads what was
// published (both sequentially consistent): either hold() sees the step, and
// E is past it, or may_begin() sees the hold, and the step waits for E.
//
// may_begin() from actors' threads; hold() and release() from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace rill {

class RunEnd {
 public:
  // The plan's end: the run's steps are [first, end).
  RunEnd(int64_t first, int64_t end) : first_(first), plan_end_(end), end_(end), begun_(first - 1) {}

  int64_t first() const { return first_; }
  int64_t end() const { return end_.load(); }

  // Whether a source or variable may begin (act for) `step` now. False at
  // or past the end, and while held (the actor is woken on release).
  bool may_begin(int64_t step) {
    if (step >= end_.load()) return false;
    int64_t seen = begun_.load();
    while (seen < step && !begun_.compare_exchange_weak(seen, step)) {
    }
    return !held_.load();
  }

  // Stops steps from beginning; the last step begun on this node
  // (first - 1 when none).
  int64_t hold() {
    held_.store(true);
    return begun_.load();
  }

  // The end agreed over the nodes, from the largest that hold() returned.
  static int64_t agreed_end(int64_t first, int64_t plan_end, int64_t last_begun) {
    return std::clamp(last_begun + 1, first, plan_end);
  }

  // Ends the run before `end` (never past the plan's end, never raised) and
  // lets steps begin again up to it.
  void release(int64_t end) {
    int64_t now = end_.load();
    const int64_t to = std::min(end, plan_end_);
    while (to < now && !end_.compare_exchange_weak(now, to)) {
    }
    held_.store(false);
  }

 private:
  const int64_t first_;
  const int64_t plan_end_;
  std::atomic<int64_t> end_;
  std::atomic<int64_t> begun_;
  std::atomic<bool> held_{false};
};

}  // namespace rill
