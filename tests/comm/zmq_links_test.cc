// The ZeroMQ transport's TCP links as the kernel sees them: each peer's
// connection counters (TCP_INFO, read for the master's slow-link report),
// none where a peer is reached another way, and a world whose sockets pass
// ZeroMQ's default limit.
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

TEST_CASE("zmq: the kernel's counters of each TCP link: bytes the peer acknowledged and time busy sending") {
  auto endpoints = loopback_endpoints(free_ports(3));
  std::vector<std::unique_ptr<Transport>> ranks;
  for (int r = 0; r < 3; ++r) {
    auto made = make_zmq_transport(r, endpoints, tcp_only());
    REQUIRE(made.ok());
    ranks.push_back(std::move(*made));
  }
  introduce({ranks[0].get(), ranks[1].get(), ranks[2].get()});
  constexpr size_t kBytes = 8 << 20;
  const std::vector<std::byte> body(kBytes, std::byte{0x5a});
  REQUIRE(ranks[0]->send(2, 1, as_span("small")).ok());
  Received got;
  REQUIRE(ranks[2]->recv_message(0, 1, in_ms(10000), &got).ok());
  // The kernel counts busy time in jiffies (4 ms at HZ 250): 8 MiB over
  // loopback may all go within one and count none. Sent again (at most 16
  // times) until a tick lands in a transfer.
  std::vector<std::optional<TcpLinkCounters>> links;
  int64_t sent = 0;
  for (int round = 0; round < 16; ++round) {
    REQUIRE(ranks[0]->send(1, 1, as_span("big"), body).ok());
    REQUIRE(ranks[1]->recv_message(0, 1, in_ms(10000), &got).ok());
    sent += static_cast<int64_t>(kBytes);
    // The acknowledgements trail the delivery by a round trip: bounded wait.
    for (int i = 0; i < 200; ++i) {
      links = ranks[0]->link_counters();
      if (links.size() == 3 && links[1] && links[1]->bytes_acked >= sent) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (links.size() == 3 && links[1] && links[1]->busy_us > 0) break;
  }
  REQUIRE(links.size() == 3);
  CHECK_FALSE(links[0]);  // itself
  REQUIRE(links[1]);
  REQUIRE(links[2]);
  CHECK(links[1]->bytes_acked >= sent);
  CHECK(links[1]->busy_us > 0);
  CHECK(links[2]->bytes_acked < links[1]->bytes_acked);
  ranks[0]->close();
  for (const auto& link : ranks[0]->link_counters()) CHECK_FALSE(link);
}

TEST_CASE("zmq: a peer reached through shared memory, and an in-process transport, have no TCP counters") {
  auto endpoints = loopback_endpoints(free_ports(2));
  auto a = make_zmq_transport(0, endpoints);
  auto b = make_zmq_transport(1, endpoints);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  introduce({a->get(), b->get()});
  const auto links = (*a)->link_counters();
  REQUIRE(links.size() == 2);
  CHECK_FALSE(links[1]);
  auto world = make_world(Kind::kInproc, 2);
  CHECK(world[0]->link_counters().empty());
}

// Each peer takes three of ZeroMQ's sockets (its PUSH, the monitor's two
// ends), past ZeroMQ's default of 1,023 per context from 342 ranks on.
TEST_CASE("zmq: a world of 1,100 ranks starts: ZeroMQ's socket limit follows the world") {
  // About 3,300 descriptors: the soft limit goes up to the hard one, as an
  // agent's does (runtime/cluster/agent.cc).
  rlimit files{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &files) == 0);
  if (files.rlim_max != RLIM_INFINITY && files.rlim_max < 8192) {
    MESSAGE("skipped: the open-file limit's hard bound is under 8192");
    return;
  }
  files.rlim_cur = files.rlim_max == RLIM_INFINITY ? 1 << 20 : files.rlim_max;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &files) == 0);
  auto ports = free_ports(1);
  std::vector<Endpoint> endpoints;
  endpoints.push_back({"127.0.0.1", ports[0]});
  // Nobody listens at the others: their connections are only dialled.
  for (int r = 1; r < 1100; ++r) endpoints.push_back({"127.0.3." + std::to_string(r % 250 + 1), 9});
  auto big = make_zmq_transport(0, endpoints, tcp_only());
  REQUIRE_MESSAGE(big.ok(), big.status().to_string());
  CHECK((*big)->world() == 1100);
  (*big)->close();
}
