// Which node has a slow link: the master's slow-link report. The pace report
// (runtime/watch/pace.h) names a node that computes slowly; a node behind a
// slow link computes as fast as the others, and in a synchronous job every
// node waits for it alike. What tells it apart is the rate its links carry
// while they have something to carry: each node reports, with its
// heartbeat, the kernel's counters of its TCP connection to each peer (bytes
// acknowledged, time busy: comm/tcp_link.h). Over a sliding window the
// master derives each connection's rate; a node's best link is the fastest
// connection it is either end of. A slow link is slow both ways, so every
// link of the node behind it is slow, while each other node has at least
// one fast one. A node is named when its best link is at most 1/kSlowLinkRatio
// of the median of the other nodes' best (at least two others known: with
// two nodes one link joins them, and its slowness is both ends' alike).
//
// A plain value; the master's loop thread owns it.
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include "comm/tcp_link.h"

namespace rill {

inline constexpr double kSlowLinkRatio = 3.0;

struct LinkReport {
  bool known = false;       // one of its connections carried enough in the window
  double best_mb_per_s = 0;  // its fastest connection's rate while busy (either direction), MB/s
  bool slow = false;
  double ratio = 0;  // the other nodes' median best over its best (two others known)
};

class LinkTracker {
 public:
  explicit LinkTracker(int nodes, double window_seconds = 10.0)
      : window_(window_seconds), samples_(static_cast<size_t>(nodes)) {}

  // A node's counters (index = peer node) at time `at` (seconds on any
  // steady clock).
  void add(int node, double at, std::vector<std::optional<comm::TcpLinkCounters>> links);
  void clear();
  // Each node's links at time `now`; a node without a report for
  // kStaleSeconds is not known.
  std::vector<LinkReport> report(double now) const;

  static constexpr double kStaleSeconds = 5.0;
  // A connection's rate counts once it carried this much in the window, for
  // this long: less is a burst too short to measure the link.
  static constexpr long long kMinBytes = 1 << 20;
  static constexpr long long kMinBusyUs = 50'000;

 private:
  struct Sample {
    double at;
    std::vector<std::optional<comm::TcpLinkCounters>> links;
  };
  // The rate of node `from`'s connection to `to` over the window, MB/s; 0
  // when unknown.
  double rate(size_t from, size_t to) const;
  double window_;
  std::vector<std::deque<Sample>> samples_;
};

}  // namespace rill
