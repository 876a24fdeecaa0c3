// A GroupTransport as the whole transport of a run on some of the machine
// list's ranks (the survivors of a lost node): handlers see group ranks,
// and a message from a rank outside the group never reaches them.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "comm/group_transport.h"
#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

TEST_CASE("a group's handler sees the sender's group rank and drops outsiders") {
  for (Kind kind : kAllKinds) {
    CAPTURE(kind_name(kind));
    auto transports = make_world(kind, 3);
    // Ranks 0 and 2 form the group; rank 1 is outside it.
    GroupTransport group0(*transports[0], {0, 2});
    GroupTransport group2(*transports[2], {0, 2});
    CHECK(group0.rank() == 0);
    CHECK(group2.rank() == 1);
    CHECK(group0.group_rank(2) == 1);
    CHECK(group0.group_rank(1) == -1);
    constexpr uint64_t kTag = 41, kMark = 42;
    std::atomic<int> from_group{0}, seen_from{-1}, from_outside{0}, marks{0};
    group0.accept_tags(kTag, kMark + 1);
    // Rank 1's mark, on the transport underneath, follows its message to
    // the group: once it is in, the group's handler has seen that message.
    transports[0]->set_handler(kMark, [&](int, const MessageView&) { ++marks; });
    group0.set_handler(kTag, [&](int from, const MessageView& message) {
      seen_from = from;
      (message.size() == 3 ? from_group : from_outside)++;
    });
    const std::byte inside[3] = {}, outside[5] = {};
    // A transport delivers one peer's messages in order (not across peers).
    REQUIRE(transports[1]->send(0, kTag, outside).ok());
    REQUIRE(transports[1]->send(0, kMark, outside).ok());
    REQUIRE(group2.send(0, kTag, inside).ok());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((from_group.load() == 0 || marks.load() == 0) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    group0.set_handler(kTag, nullptr);
    transports[0]->set_handler(kMark, nullptr);
    CHECK(marks.load() == 1);
    CHECK(from_group.load() == 1);
    CHECK(seen_from.load() == 1);  // rank 2 of the machine list is rank 1 of the group
    CHECK(from_outside.load() == 0);
    for (auto& t : transports) t->close();
  }
}

}  // namespace
