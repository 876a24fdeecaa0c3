#include "runtime/watch/pace.h"

#include <algorithm>

namespace rill {

void PaceTracker::add(int node, int64_t run, double at, double steps, double busy_seconds) {
  if (node < 0 || node >= static_cast<int>(samples_.size())) return;
  if (run != run_) {
    clear();
    run_ = run;
  }
  auto& samples = samples_[static_cast<size_t>(node)];
  samples.push_back({at, steps, busy_seconds});
  // Keep the newest sample older than the window, so the window is full.
  while (samples.size() > 2 && samples[1].at <= at - window_) samples.pop_front();
}

void PaceTracker::clear() {
  for (auto& s : samples_) s.clear();
  run_ = -1;
}

std::vector<PaceReport> PaceTracker::report(double now) const {
  std::vector<PaceReport> out(samples_.size());
  for (size_t n = 0; n < samples_.size(); ++n) {
    const auto& s = samples_[n];
    if (s.size() < 2 || s.back().at < now - kStaleSeconds) continue;
    const Sample& a = s.front();
    const Sample& b = s.back();
    const double seconds = b.at - a.at, steps = b.steps - a.steps;
    if (seconds <= 0 || steps <= 0) continue;
    out[n].known = true;
    out[n].steps_per_second = steps / seconds;
    out[n].busy_ms_per_step = 1000.0 * std::max(0.0, b.busy - a.busy) / steps;
  }
  for (size_t n = 0; n < out.size(); ++n) {
    if (!out[n].known || out[n].busy_ms_per_step <= 0) continue;
    std::vector<double> others;
    for (size_t m = 0; m < out.size(); ++m)
      if (m != n && out[m].known && out[m].busy_ms_per_step > 0) others.push_back(out[m].busy_ms_per_step);
    if (others.empty()) continue;
    std::sort(others.begin(), others.end());
    const size_t k = others.size();
    const double median = k % 2 ? others[k / 2] : 0.5 * (others[k / 2 - 1] + others[k / 2]);
    out[n].ratio = out[n].busy_ms_per_step / median;
    out[n].slow = out[n].ratio >= kSlowRatio;
  }
  return out;
}

}  // namespace rill
