// Which node has a slow link: the master's slow-link report. The pace report
// (runtime/watch/pace.h) names a node that computes slowly; a node behind a
// slow link computes as fast as the others, and in a synchronous job every
// node waits for it alike. What tells it apart is the rate its links carry
// while they have something to carry.
//
// Each agent reads the kernel's counters of its TCP connection to each peer
// (bytes acknowledged, time busy: comm/tcp_link.h) and keeps them over a
// sliding window (LinkWindow); its heartbeat carries the rate of each
// connection that carried enough in the window, a few bytes a busy peer. The
// master keeps each node's latest rates (LinkTracker): a node's best link is
// the fastest connection it is either end of. A slow link is slow both ways,
// so every link of the node behind it is slow, while each other node has at
// least one fast one. A node is named when its best link is at most
// 1/kSlowLinkRatio of the median of the other nodes' best (at least two
// others known: with two nodes one link joins them, and its slowness is
// both ends' alike).
//
// Plain values; each is owned by one thread (the agent's loop, the master's).
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include "comm/tcp_link.h"

namespace rill {

inline constexpr double kSlowLinkRatio = 3.0;
using comm::PeerRate;

// One node's own connections over a sliding window.
class LinkWindow {
 public:
  explicit LinkWindow(double window_seconds = 10.0) : window_(window_seconds) {}
  // The counters (index = peer) at time `at` (seconds on any steady clock).
  void add(double at, const std::vector<std::optional<comm::TcpLinkCounters>>& links);
  // The rate of each connection that carried at least kMinBytes for at
  // least kMinBusyUs in the window, one connection (not counters of two
  // that followed each other).
  std::vector<PeerRate> rates() const;

  static constexpr long long kMinBytes = 1 << 20;
  static constexpr long long kMinBusyUs = 50'000;

 private:
  struct Sample {
    double at;
    comm::TcpLinkCounters counters;
  };
  double window_;
  std::vector<std::deque<Sample>> peers_;
};

struct LinkReport {
  bool known = false;        // one of its connections has a rate
  double best_mb_per_s = 0;  // its fastest connection's rate while busy (either direction), MB/s
  bool slow = false;
  double ratio = 0;  // the other nodes' median best over its best (two others known)
};

// The master's view: each node's latest rates.
class LinkTracker {
 public:
  explicit LinkTracker(int nodes) : latest_(static_cast<size_t>(nodes)) {}
  // Node `node`'s rates at time `at`; peers outside the cluster, or itself,
  // are ignored.
  void add(int node, double at, std::vector<PeerRate> rates);
  void clear();
  // Each node's links at time `now`; a node without a report for
  // kStaleSeconds is not known, and neither are the rates it reported.
  std::vector<LinkReport> report(double now) const;

  static constexpr double kStaleSeconds = 5.0;

 private:
  struct Latest {
    double at = -1;
    std::vector<PeerRate> rates;
  };
  std::vector<Latest> latest_;
};

}  // namespace rill
