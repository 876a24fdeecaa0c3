// Liveness: a count that grows while work a wait depends on goes on
// elsewhere (a node writing its checkpoint: runtime/checkpoint/
// write_progress.h), and a watcher of it. A wait that reaches its deadline
// while the count moved since the deadline was set waits on; one that saw
// no move ends there. Collectives, a node's device collective and the
// master's wait for the nodes' ends all wait so.
#pragma once

#include <cstdint>
#include <functional>

namespace rill::comm {

// Sums of counts are unsigned: a count another node claims (a heartbeat's)
// may be anything, and only whether the count moved matters, so a sum that
// wraps around is still a change and never undefined.
using Liveness = std::function<uint64_t()>;

class LivenessWatch {
 public:
  explicit LivenessWatch(const Liveness& liveness) : liveness_(liveness) { restart(); }
  // The count as the (new) deadline is set.
  void restart() { seen_ = liveness_ ? liveness_() : 0; }
  // Whether the count moved since the deadline was set; when it did, the
  // caller moves its deadline on and the watch counts from now.
  bool moved() {
    if (!liveness_) return false;
    const uint64_t now = liveness_();
    if (now == seen_) return false;
    seen_ = now;
    return true;
  }

 private:
  const Liveness& liveness_;
  uint64_t seen_ = 0;
};

}  // namespace rill::comm
