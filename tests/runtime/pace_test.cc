// The master's straggler report (runtime/watch/pace.h): step rates and
// device time per step over a sliding window, and which node is slow.
#include <doctest/doctest.h>

#include "runtime/watch/pace.h"

namespace rill {
namespace {

// Node n reports every second for `seconds`: `rate` steps/s, `busy` s of
// device time per step.
void feed(PaceTracker& t, int node, int64_t job, double rate, double busy, int seconds, double from = 0) {
  for (int s = 0; s <= seconds; ++s) t.add(node, job, from + s, rate * s, rate * s * busy);
}

TEST_CASE("a node computing longer per step than the others is named slow; equal nodes are not") {
  PaceTracker t(3);
  feed(t, 0, 1, 80, 0.006, 5);
  feed(t, 1, 1, 80, 0.012, 5);  // twice the device time per step: it holds everyone back
  feed(t, 2, 1, 80, 0.0065, 5);
  auto r = t.report(5);
  for (int n = 0; n < 3; ++n) {
    CAPTURE(n);
    CHECK(r[n].known);
    CHECK(r[n].steps_per_second == doctest::Approx(80));
  }
  CHECK(r[1].busy_ms_per_step == doctest::Approx(12));
  CHECK(r[1].slow);
  CHECK(r[1].ratio == doctest::Approx(12 / 6.25));  // the others' median: (6 + 6.5) / 2
  CHECK_FALSE(r[0].slow);
  CHECK_FALSE(r[2].slow);
  // Just under the ratio is not slow.
  PaceTracker close(2);
  feed(close, 0, 1, 50, 0.010, 3);
  feed(close, 1, 1, 50, 0.0149, 3);
  CHECK_FALSE(close.report(3)[1].slow);
}

TEST_CASE("pace: nodes whose devices do nothing are left out, one sample is not enough, a new job starts over") {
  PaceTracker t(4);
  feed(t, 0, 1, 40, 0.0, 4);  // a CPU pserver: its work is on comm threads
  feed(t, 1, 1, 40, 0.0, 4);
  feed(t, 2, 1, 40, 0.010, 4);
  feed(t, 3, 1, 40, 0.011, 4);
  auto r = t.report(4);
  CHECK(r[0].known);
  CHECK(r[0].busy_ms_per_step == 0);
  CHECK_FALSE(r[0].slow);
  CHECK_FALSE(r[2].slow);  // compared with node 3 only
  CHECK_FALSE(r[3].slow);
  CHECK(r[3].ratio == doctest::Approx(1.1));
  // Alone, a node has nothing to be compared with.
  PaceTracker alone(2);
  feed(alone, 0, 1, 40, 0.02, 3);
  CHECK(alone.report(3)[0].known);
  CHECK_FALSE(alone.report(3)[0].slow);
  CHECK_FALSE(alone.report(3)[1].known);
  // One sample, or no steps made: unknown.
  PaceTracker once(1);
  once.add(0, 1, 0, 10, 1);
  CHECK_FALSE(once.report(1)[0].known);
  once.add(0, 1, 1, 10, 1);
  CHECK_FALSE(once.report(1)[0].known);
  // A report of another run (a job's next phase) forgets the last one's;
  // clear() forgets all.
  t.add(2, 2, 10, 0, 0);
  CHECK_FALSE(t.report(10)[3].known);
  CHECK_FALSE(t.report(10)[2].known);
  t.clear();
  for (const PaceReport& p : t.report(10)) CHECK_FALSE(p.known);
  t.add(7, 1, 0, 0, 0);  // a node the cluster does not have: ignored
}

TEST_CASE("pace follows the last window: a node that slows down is named within it") {
  PaceTracker t(2, 10.0);
  feed(t, 0, 1, 100, 0.005, 60);
  feed(t, 1, 1, 100, 0.005, 30);
  // Node 1 slows down after 30 s: 3x the device time per step from then on.
  for (int s = 31; s <= 60; ++s) t.add(1, 1, s, 100.0 * s, 100 * 30 * 0.005 + 100.0 * (s - 30) * 0.015);
  auto r = t.report(60);
  CHECK(r[1].busy_ms_per_step == doctest::Approx(15));  // the window holds only the slow part
  CHECK(r[1].slow);
  CHECK_FALSE(r[0].slow);
  // A node whose part is done stops reporting: after kStaleSeconds it is
  // no longer known (nor compared with).
  CHECK(t.report(60 + PaceTracker::kStaleSeconds)[1].known);
  CHECK_FALSE(t.report(61 + PaceTracker::kStaleSeconds)[1].known);
}

}  // namespace
}  // namespace rill
