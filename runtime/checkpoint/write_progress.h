// WriteProgress: what one process's checkpoint writers have put on disk,
// read from any thread. Training waits for a disk slower than its
// checkpoints (checkpoint_collector.h), and a node waiting so is not stuck:
// its writer's bytes are word that it is alive. The run's stall detector and
// its collectives' deadlines count them (RunOptions::liveness), the node's
// heartbeats carry them to the master, and the master's heartbeats carry
// every node's on to the others, whose collectives wait for that node.
//
// bytes() only grows (every file of every step), so any change is progress;
// describe() says what is being written, for a stall's error.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "base/mutex.h"

namespace rill {

class WriteProgress {
 public:
  // A write of step `step`'s file begins; then each `done` of `total` bytes
  // of it; then its end (written or not).
  void begin(int64_t step) {
    MutexLock lock(mu_);
    step_ = step;
    done_ = total_ = 0;
    moved_ = std::chrono::steady_clock::now();
  }
  void update(uint64_t done, uint64_t total) {
    MutexLock lock(mu_);
    if (done > done_) bytes_.fetch_add(static_cast<int64_t>(done - done_), std::memory_order_relaxed);
    done_ = done;
    total_ = total;
    moved_ = std::chrono::steady_clock::now();
  }
  void end() {
    MutexLock lock(mu_);
    step_ = -1;
  }

  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // The step whose file is being written, or -1.
  int64_t step() const {
    MutexLock lock(mu_);
    return step_;
  }
  // "the checkpoint of step 30: 1.2 of 4.8 MB written, the last 3.1 s ago",
  // or empty when nothing is being written.
  std::string describe() const {
    MutexLock lock(mu_);
    if (step_ < 0) return {};
    const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - moved_).count();
    return fmt::format("the checkpoint of step {}: {:.1f} of {:.1f} MB written, the last {:.1f} s ago", step_,
                       static_cast<double>(done_) / 1e6, static_cast<double>(total_) / 1e6, since);
  }

 private:
  std::atomic<int64_t> bytes_{0};
  mutable Mutex mu_;
  int64_t step_ GUARDED_BY(mu_) = -1;
  uint64_t done_ GUARDED_BY(mu_) = 0;
  uint64_t total_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point moved_ GUARDED_BY(mu_){};
};

}  // namespace rill
