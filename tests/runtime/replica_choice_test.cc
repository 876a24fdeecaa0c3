// Which survivors a live job that lost nodes goes on from, with replicas on
// the next `--replica-copies` nodes of the ring (runtime/cluster/
// replica_choice.h): the steps the model can be made whole at, and who
// sends node 0 what.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "runtime/cluster/replica_choice.h"

namespace rill::agent_internal {
namespace {

std::string named(int r) { return "node " + std::to_string(r); }

// Ranks up are those not in `lost`; every rank copies pieces.
ReplicaHolders holders_of(const std::vector<int>& ring, int copies, const std::map<int, KeptSteps>& kept,
                          const std::set<int>& lost) {
  return find_replica_holders(
      ring, copies, kept, [&](int r) { return lost.count(r) == 0; }, [](int) { return true; }, named);
}

KeptSteps holding(std::vector<int64_t> own, std::map<int, std::vector<int64_t>> replicas) {
  KeptSteps k;
  k.own_replicas = std::move(own);
  k.replicas = std::move(replicas);
  return k;
}

TEST_CASE("two neighbours lost at once go on from the next survivor's two replicas") {
  // Ring 0-1-2-3, two copies: 3 holds 1's and 2's, 0 holds 2's and 3's.
  const std::map<int, KeptSteps> kept = {
      {0, holding({10, 20, 30}, {{2, {10, 20}}, {3, {20, 30}}})},
      {3, holding({10, 20, 30}, {{1, {20, 30}}, {2, {20, 30}}})},
  };
  const ReplicaHolders h = holders_of({0, 1, 2, 3}, 2, kept, {1, 2});
  CHECK(h.problem.empty());
  CHECK(h.lost == "node 1, node 2");
  REQUIRE(h.steps);
  CHECK(*h.steps == std::set<int64_t>{20, 30});
  CHECK(h.buddies.at(1) == std::vector<int>{3});     // 2 lost with it
  CHECK(h.buddies.at(2) == std::vector<int>{3, 0});  // nearest first
  const auto gather = gather_at(h, kept, 30);
  REQUIRE(gather.size() == 2);
  CHECK(gather.at(0).own);
  CHECK(gather.at(0).replicas_of.empty());
  CHECK(gather.at(3).own);
  CHECK(gather.at(3).replicas_of == std::vector<int>{1, 2});
}

TEST_CASE("a lost node's replica comes from a farther buddy where the nearest lacks the step") {
  // Ring 0-1-2, two copies, 1 lost: 2 (its nearest) holds its copy of step
  // 10 only; 0 holds 10 and 20.
  const std::map<int, KeptSteps> kept = {
      {0, holding({10, 20}, {{1, {10, 20}}, {2, {10, 20}}})},
      {2, holding({10, 20}, {{1, {10}}, {0, {10, 20}}})},
  };
  const ReplicaHolders h = holders_of({0, 1, 2}, 2, kept, {1});
  REQUIRE(h.steps);
  CHECK(*h.steps == std::set<int64_t>{10, 20});
  const auto newest = gather_at(h, kept, 20);
  CHECK(newest.at(0).replicas_of == std::vector<int>{1});
  CHECK(newest.at(2).replicas_of.empty());
  CHECK(newest.at(2).own);
  // At 10 the nearest holds it, and sends it.
  const auto older = gather_at(h, kept, 10);
  CHECK(older.at(2).replicas_of == std::vector<int>{1});
  CHECK(older.at(0).replicas_of.empty());
}

TEST_CASE("a lost node whose buddies are all lost too is named, with them") {
  const std::map<int, KeptSteps> kept = {{0, holding({10}, {{2, {10}}, {3, {10}}})}};
  // One copy: 1's replica was on 2 only.
  const ReplicaHolders one = holders_of({0, 1, 2}, 1, {{0, holding({10}, {{2, {10}}})}}, {1, 2});
  CHECK(one.problem == "node 1 is lost, and so is node 2, which held its replica");
  // Two copies on a ring of 4 losing 1, 2 and 3: 1's were on 2 and 3.
  const ReplicaHolders two = holders_of({0, 1, 2, 3}, 2, kept, {1, 2, 3});
  CHECK(two.problem == "node 1 is lost, and so are node 2 and node 3, which held its replicas");
}

TEST_CASE("copies past the ring reach every other rank and never the rank itself; ranks without pieces send none") {
  const std::map<int, KeptSteps> kept = {
      {0, holding({5}, {{1, {5}}, {2, {5}}})},
      {2, holding({}, {{0, {5}}, {1, {5}}})},
  };
  // Rank 2 holds no pieces of its own (a pserver's trainer): it sends only
  // the replica it is asked for.
  const ReplicaHolders h = find_replica_holders(
      {0, 1, 2}, 5, kept, [](int r) { return r != 1; }, [](int r) { return r != 2; }, named);
  CHECK(h.buddies.at(1) == std::vector<int>{2, 0});
  REQUIRE(h.steps);
  CHECK(*h.steps == std::set<int64_t>{5});
  CHECK_FALSE(h.own.at(2).own);
  const auto gather = gather_at(h, kept, 5);
  CHECK(gather.at(2).replicas_of == std::vector<int>{1});
  CHECK_FALSE(gather.at(2).own);
  // Without a lost rank to carry, a rank with no pieces is left out.
  const ReplicaHolders none = find_replica_holders(
      {0, 1, 2}, 1, kept, [](int) { return true; }, [](int r) { return r != 2; }, named);
  CHECK(none.lost.empty());
  CHECK(gather_at(none, kept, 5).count(2) == 0);
}

}  // namespace
}  // namespace rill::agent_internal
