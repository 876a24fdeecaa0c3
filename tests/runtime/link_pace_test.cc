// The slow-link report (runtime/watch/link_pace.h): each agent's connection
// rates from the kernel's counters over a sliding window (LinkWindow), and
// the master's view of every node's (LinkTracker): a node's best link, and
// which node is behind a slow one.
#include <doctest/doctest.h>

#include <map>
#include <utility>

#include "runtime/watch/link_pace.h"

namespace rill {
namespace {

using Links = std::vector<std::optional<comm::TcpLinkCounters>>;

// Every node's window takes its counters every second for `seconds`;
// `mb_per_s[{i, j}]` is what node i's connection to j carries while busy,
// busy half of each second. Each node's rates then go to `tracker` at
// time `seconds`.
void feed(LinkTracker& tracker, int nodes, const std::map<std::pair<int, int>, double>& mb_per_s, int seconds) {
  for (int i = 0; i < nodes; ++i) {
    LinkWindow window;
    for (int s = 0; s <= seconds; ++s) {
      Links links(static_cast<size_t>(nodes));
      for (const auto& [pair, rate] : mb_per_s)
        if (pair.first == i) {
          const long long busy_us = 500'000LL * s;
          links[static_cast<size_t>(pair.second)] =
              comm::TcpLinkCounters{static_cast<int64_t>(rate * static_cast<double>(busy_us)), busy_us, 1};
        }
      window.add(s, links);
    }
    tracker.add(i, seconds, window.rates());
  }
}

TEST_CASE("a ring with one node behind a slow link: that node is named, the others are not") {
  // 0 -> 1 -> 2 -> 0 with node 2's link 10x slower: the two connections
  // that cross it are slow, node 0 and node 1 each have a fast one.
  LinkTracker t(3);
  feed(t, 3, {{{0, 1}, 110.0}, {{1, 2}, 11.0}, {{2, 0}, 11.5}}, 6);
  const auto r = t.report(6);
  for (int n = 0; n < 3; ++n) {
    CAPTURE(n);
    CHECK(r[n].known);
  }
  CHECK(r[0].best_mb_per_s == doctest::Approx(110));
  CHECK(r[1].best_mb_per_s == doctest::Approx(110));  // what it receives from node 0
  CHECK(r[2].best_mb_per_s == doctest::Approx(11.5));
  CHECK(r[2].slow);
  CHECK(r[2].ratio == doctest::Approx(110 / 11.5));
  CHECK_FALSE(r[0].slow);
  CHECK_FALSE(r[1].slow);
}

TEST_CASE("links: equal links name nobody; two nodes cannot tell which end is slow; just under the ratio is not slow") {
  LinkTracker equal(3);
  feed(equal, 3, {{{0, 1}, 100.0}, {{1, 2}, 90.0}, {{2, 0}, 95.0}}, 4);
  for (const LinkReport& r : equal.report(4)) CHECK_FALSE(r.slow);

  LinkTracker two(2);
  feed(two, 2, {{{0, 1}, 100.0}, {{1, 0}, 5.0}}, 4);
  for (const LinkReport& r : two.report(4)) {
    CHECK(r.known);
    CHECK_FALSE(r.slow);
  }

  LinkTracker close(3);
  feed(close, 3, {{{0, 1}, 100.0}, {{1, 2}, 34.0}, {{2, 0}, 34.0}}, 4);
  CHECK_FALSE(close.report(4)[2].slow);  // 100 / 34 < 3
}

TEST_CASE("links: too little carried has no rate, a connection made again starts over, a stale node is left out") {
  // 0.5 MB in 0.5 s per second: under a MiB in the first second only.
  LinkTracker t(3);
  feed(t, 3, {{{0, 1}, 1.0}}, 1);
  CHECK_FALSE(t.report(1)[0].known);
  feed(t, 3, {{{0, 1}, 1.0}}, 4);
  CHECK(t.report(4)[0].known);
  CHECK(t.report(4)[1].known);  // as the receiving end
  CHECK_FALSE(t.report(4)[2].known);
  // Node 0 stops reporting: its connection's rate goes with it.
  CHECK_FALSE(t.report(4 + LinkTracker::kStaleSeconds + 1)[1].known);

  // Counters of two connections one after the other are never subtracted.
  LinkWindow again;
  again.add(0, Links{std::nullopt, comm::TcpLinkCounters{50 << 20, 2'000'000, 1}});
  again.add(1, Links{std::nullopt, comm::TcpLinkCounters{60 << 20, 2'100'000, 2}});  // made again
  CHECK(again.rates().empty());
  again.add(2, Links{std::nullopt, comm::TcpLinkCounters{62 << 20, 2'200'000, 2}});
  REQUIRE(again.rates().size() == 1);
  CHECK(again.rates()[0].peer == 1);
  CHECK(again.rates()[0].mb_per_s == doctest::Approx((2 << 20) / 100'000.0));

  // Rates for peers outside the cluster, or for itself, change nothing.
  LinkTracker odd(2);
  odd.add(1, 1, {{7, 50.0}, {1, 50.0}, {-1, 50.0}});
  odd.add(5, 1, {{0, 50.0}});
  for (const LinkReport& r : odd.report(1)) CHECK_FALSE(r.known);
  odd.add(1, 1, {{0, 50.0}});
  CHECK(odd.report(1)[0].known);
  odd.clear();
  CHECK_FALSE(odd.report(1)[0].known);
}

}  // namespace
}  // namespace rill
