// The flight record (comm/flight_record.h): each collective caller's call in
// flight and the node it waits for, kept after a failed call; the last
// events, bounded; actor messages by link.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/flight_record.h"
#include "comm/transport.h"

namespace rill::comm {
namespace {

TEST_CASE("a collective's call in flight names the node it waits for, then its last completed call") {
  // Two ranks of a group that are nodes 3 and 5; rank 1 comes late.
  auto transports = make_inproc_transports(2);
  FlightRecord record(6);
  const int caller = record.add_caller("grad/w1", {3, 5});
  Collectives early(*transports[0], CollectiveOptions{.record = &record, .caller = caller});
  Collectives late(*transports[1]);
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  Status first;
  std::thread rank0([&] { first = early.all_reduce(a, a, 7); });
  std::vector<FlightRecord::Wait> waits;
  for (int i = 0; i < 400 && waits.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    waits = record.waits();
  }
  REQUIRE(waits.size() == 1);
  CHECK(waits[0].node == 5);
  CHECK(waits[0].seq == 0);
  CHECK(waits[0].line.find("grad/w1: all_reduce #0 among nodes [3, 5] waits for node 5") == 0);
  REQUIRE(late.all_reduce(b, b, 7).ok());
  rank0.join();
  REQUIRE(first.ok());
  CHECK(record.waits().empty());
  const auto j = record.json();
  CHECK(j["callers"][0]["state"] == "idle");
  CHECK(j["callers"][0]["last_completed"]["seq"] == 0);
  CHECK(j["callers"][0]["last_completed"]["op"] == "all_reduce");
  REQUIRE(j["events"].size() == 2);
  CHECK(j["events"][0]["event"] == "begin");
  CHECK(j["events"][1]["event"] == "end");
}

TEST_CASE("a failed call keeps the node it waited for; events are bounded; actor messages count by link") {
  FlightRecord record(3);
  const int c = record.add_caller("bucket0", {0, 1, 2});
  for (int i = 0; i < 200; ++i) {
    record.begin(c, "all_reduce", 64);
    record.end(c, true);
  }
  record.begin(c, "all_reduce", 64);
  record.wait_for(c, 2);
  record.end(c, false);  // cancelled: the run was aborted
  record.message(true, 1, 100);
  record.message(false, 1, 50);
  record.message(false, 7, 50);  // not a node of this run: ignored
  auto waits = record.waits();
  REQUIRE(waits.size() == 1);
  CHECK(waits[0].line.find("bucket0: all_reduce #200 among nodes [0, 1, 2] failed waiting for node 2") == 0);
  const auto j = record.json(1000);
  CHECK(j["events"].size() == FlightRecord::kEvents);
  CHECK(j["events"].back()["event"] == "received");
  CHECK(j["callers"][0]["last_completed"]["seq"] == 199);
  REQUIRE(j["links"].size() == 1);
  CHECK(j["links"][0]["sent_bytes"] == 100);
  CHECK(j["links"][0]["received"] == 1);
}

}  // namespace
}  // namespace rill::comm
