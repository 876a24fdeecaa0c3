// The link up to the master (runtime/cluster/zmq_control_channel.cc): a
// node tells a master whose process is gone from one that lives, by the
// link closing and its reconnects being refused, with and without a
// cluster key. This is how a node learns of a master lost before its data
// connection to the master was ever up (runtime/cluster/node_agent.cc,
// tick).
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "comm/cluster_key.h"
#include "runtime/cluster/zmq_control_channel.h"
#include "tests/comm/comm_test_util.h"

namespace rill {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct Link {
  ZmqControlOptions options;
  std::unique_ptr<ControlChannel> master, node;

  explicit Link(bool keyed) {
    const std::vector<int> ports = comm::testing::free_ports(2);
    options.machines = {Machine{"127.0.0.1", ports[0]}, Machine{"127.0.0.1", ports[1]}};
    if (keyed) {
      auto key = comm::generate_cluster_key();
      REQUIRE(key.ok());
      options.key = std::make_shared<const comm::ClusterKey>(*key);
    }
    start_master();
    ZmqControlOptions mine = options;
    mine.rank = 1;
    auto made = make_zmq_control_channel(mine);
    REQUIRE_MESSAGE(made.ok(), made.status().to_string());
    node = std::move(*made);
  }

  void start_master() {
    auto made = make_zmq_control_channel(options);
    REQUIRE_MESSAGE(made.ok(), made.status().to_string());
    master = std::move(*made);
  }

  // A message from the node reaches the master: the link is through its
  // handshake. Bounded at 10 s.
  void heard() {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    ControlChannel::Incoming in;
    bool got = false;
    while (!got && Clock::now() < deadline) {
      (void)node->send_to_master("hello");
      got = master->receive(milliseconds(50), &in) && in.bytes == "hello";
    }
    REQUIRE(got);
  }
};

TEST_CASE("a node tells a master whose process is gone by its control link closing, keyed or not") {
  for (bool keyed : {false, true}) {
    CAPTURE(keyed);
    Link link(keyed);
    link.heard();
    CHECK_FALSE(link.node->master_closed(milliseconds(0)));
    link.master.reset();  // its port closes with it, as a process's at exit
    const auto closed_at = Clock::now();
    bool closed = false;
    while (!closed && Clock::now() - closed_at < std::chrono::seconds(10)) {
      closed = link.node->master_closed(milliseconds(300));
      if (!closed) std::this_thread::sleep_for(milliseconds(20));
    }
    CHECK(closed);
    // Not before the grace: the reconnects had 300 ms to succeed.
    CHECK(Clock::now() - closed_at >= milliseconds(300));
  }
}

TEST_CASE("a master that comes back on its port is no lost master, nor is a live one") {
  for (bool keyed : {false, true}) {
    CAPTURE(keyed);
    Link link(keyed);
    link.heard();
    link.master.reset();
    link.start_master();  // the same port, at once: the node's link connects again by itself
    link.heard();
    CHECK_FALSE(link.node->master_closed(milliseconds(0)));
  }
}

TEST_CASE("a link that never went through its handshake is not taken for a lost master") {
  const std::vector<int> ports = comm::testing::free_ports(2);
  ZmqControlOptions options;
  options.machines = {Machine{"127.0.0.1", ports[0]}, Machine{"127.0.0.1", ports[1]}};
  options.rank = 1;  // no master listens: every connect is refused
  auto node = make_zmq_control_channel(options);
  REQUIRE(node.ok());
  std::this_thread::sleep_for(milliseconds(300));
  CHECK_FALSE((*node)->master_closed(milliseconds(0)));
}

}  // namespace
}  // namespace rill
