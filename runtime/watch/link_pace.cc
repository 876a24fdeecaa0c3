#include "runtime/watch/link_pace.h"

#include <algorithm>

namespace rill {

void LinkTracker::add(int node, double at, std::vector<std::optional<comm::TcpLinkCounters>> links) {
  if (node < 0 || node >= static_cast<int>(samples_.size())) return;
  links.resize(samples_.size());  // a hostile or confused sender's length changes nothing else
  auto& samples = samples_[static_cast<size_t>(node)];
  samples.push_back({at, std::move(links)});
  // Keep the newest sample older than the window, so the window is full.
  while (samples.size() > 2 && samples[1].at <= at - window_) samples.pop_front();
}

void LinkTracker::clear() {
  for (auto& s : samples_) s.clear();
}

double LinkTracker::rate(size_t from, size_t to) const {
  const auto& s = samples_[from];
  if (s.size() < 2) return 0;
  const auto& a = s.front().links[to];
  const auto& b = s.back().links[to];
  if (!a || !b) return 0;
  // A connection made again starts its counters over: what went backwards
  // is not a rate.
  const long long bytes = b->bytes_acked - a->bytes_acked, busy = b->busy_us - a->busy_us;
  if (bytes < kMinBytes || busy < kMinBusyUs) return 0;
  return static_cast<double>(bytes) / static_cast<double>(busy);  // bytes per microsecond = MB/s
}

std::vector<LinkReport> LinkTracker::report(double now) const {
  const size_t n = samples_.size();
  std::vector<bool> fresh(n);
  for (size_t i = 0; i < n; ++i) fresh[i] = !samples_[i].empty() && samples_[i].back().at >= now - kStaleSeconds;
  std::vector<LinkReport> out(n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const double r = std::max(fresh[i] ? rate(i, j) : 0.0, fresh[j] ? rate(j, i) : 0.0);
      out[i].best_mb_per_s = std::max(out[i].best_mb_per_s, r);
    }
    out[i].known = out[i].best_mb_per_s > 0;
  }
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
