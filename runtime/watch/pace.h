// Which node is slow: the master's straggler report. Each node reports, with
// its heartbeat, how many steps of the running job it has done and how long
// its device threads have spent acting (NodePace). Over a sliding window the
// master derives each node's step rate and its busy time per step. In a
// synchronous job every node runs at the slowest one's step rate, so the rate
// alone cannot name it; the busy time per step can: the slow node computes
// longer for each step while the others wait. A node is named slow when its
// busy time per step is at least kSlowRatio times the median of the other
// nodes' (nodes whose devices do no work, such as a CPU pserver's, are left
// out of the comparison).
//
// A plain value; the master's loop thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace rill {

inline constexpr double kSlowRatio = 1.5;

struct PaceReport {
  bool known = false;           // two samples of the current job, steps made between them
  double steps_per_second = 0;
  double busy_ms_per_step = 0;  // device time per step (per device thread)
  bool slow = false;
  double ratio = 0;             // busy time per step / the others' median (known nodes with busy time)
};

class PaceTracker {
 public:
  explicit PaceTracker(int nodes, double window_seconds = 10.0)
      : window_(window_seconds), samples_(static_cast<size_t>(nodes)) {}

  // A node's report at time `at` (seconds on any steady clock) for `run`
  // (a job's phase). A report of another run than the last one starts over.
  void add(int node, int64_t run, double at, double steps, double busy_seconds);
  // Forgets everything (no job runs).
  void clear();
  // Each node's pace at time `now`; a node that has not reported for
  // kStaleSeconds (its part of the run is done) is not known.
  std::vector<PaceReport> report(double now) const;
  static constexpr double kStaleSeconds = 5.0;

 private:
  struct Sample {
    double at, steps, busy;
  };
  double window_;
  int64_t run_ = -1;
  std::vector<std::deque<Sample>> samples_;
};

}  // namespace rill
