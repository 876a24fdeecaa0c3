#include "runtime/watch/link_pace.h"

#include <algorithm>

namespace rill {

void LinkWindow::add(double at, const std::vector<std::optional<comm::TcpLinkCounters>>& links) {
  if (peers_.size() < links.size()) peers_.resize(links.size());
  for (size_t peer = 0; peer < links.size(); ++peer) {
    auto& samples = peers_[peer];
    if (!links[peer]) continue;
    // A connection made again starts its counters over: its window too.
    if (!samples.empty() && samples.back().counters.connection != links[peer]->connection) samples.clear();
    samples.push_back({at, *links[peer]});
    // Keep the newest sample older than the window, so the window is full.
    while (samples.size() > 2 && samples[1].at <= at - window_) samples.pop_front();
  }
}

std::vector<PeerRate> LinkWindow::rates() const {
  std::vector<PeerRate> out;
  for (size_t peer = 0; peer < peers_.size(); ++peer) {
    const auto& s = peers_[peer];
    if (s.size() < 2) continue;
    const long long bytes = s.back().counters.bytes_acked - s.front().counters.bytes_acked;
    const long long busy = s.back().counters.busy_us - s.front().counters.busy_us;
    if (bytes < kMinBytes || busy < kMinBusyUs) continue;
    out.push_back({static_cast<int>(peer), static_cast<double>(bytes) / static_cast<double>(busy)});  // B/us = MB/s
  }
  return out;
}

void LinkTracker::add(int node, double at, std::vector<PeerRate> rates) {
  if (node < 0 || node >= static_cast<int>(latest_.size())) return;
  std::erase_if(rates, [&](const PeerRate& r) {
    return r.peer < 0 || r.peer >= static_cast<int>(latest_.size()) || r.peer == node || !(r.mb_per_s > 0);
  });
  latest_[static_cast<size_t>(node)] = {at, std::move(rates)};
}

void LinkTracker::clear() {
  for (Latest& l : latest_) l = {};
}

std::vector<LinkReport> LinkTracker::report(double now) const {
  const size_t n = latest_.size();
  std::vector<LinkReport> out(n);
  for (size_t from = 0; from < n; ++from) {
    if (latest_[from].at < 0 || latest_[from].at < now - kStaleSeconds) continue;
    for (const PeerRate& r : latest_[from].rates) {
      // Both ends of the connection: the sender that measured it, and the
      // receiver.
      out[from].best_mb_per_s = std::max(out[from].best_mb_per_s, r.mb_per_s);
      auto& to = out[static_cast<size_t>(r.peer)];
      to.best_mb_per_s = std::max(to.best_mb_per_s, r.mb_per_s);
    }
  }
  for (LinkReport& r : out) r.known = r.best_mb_per_s > 0;
  for (size_t i = 0; i < n; ++i) {
    if (!out[i].known) continue;
    std::vector<double> others;
    for (size_t j = 0; j < n; ++j)
      if (j != i && out[j].known) others.push_back(out[j].best_mb_per_s);
    if (others.size() < 2) continue;
    std::sort(others.begin(), others.end());
    const size_t k = others.size();
    const double median = k % 2 ? others[k / 2] : 0.5 * (others[k / 2 - 1] + others[k / 2]);
    out[i].ratio = median / out[i].best_mb_per_s;
    out[i].slow = out[i].ratio >= kSlowLinkRatio;
  }
  return out;
}

}  // namespace rill
