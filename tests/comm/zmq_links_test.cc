// The ZeroMQ transport's TCP links as the kernel sees them: each peer's
// connection counters (TCP_INFO, read for the master's slow-link report),
// none where a peer is reached another way, a world whose sockets pass
// ZeroMQ's default limit, and whose connections a data port keeps.
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "comm/zmq_transport_impl.h"
#include "tests/comm/comm_test_util.h"
#include "tests/comm/socket_probe.h"

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

// The ranks listen on 127.0.0.2 and 127.0.0.3, neither the loopback's own
// 127.0.0.1 that a connection to them would come from unless its rank bound
// its own address: they talk, so each connected from its own. A stranger
// from 127.0.0.9 is cut at once; a connection from a listed address is kept
// (until ZMTP's handshake interval, 30 s here, as any other).
TEST_CASE("zmq: a data port keeps connections from the listed addresses only, and ranks connect from theirs") {
  const auto ports = free_ports(2);
  const std::vector<Endpoint> endpoints = {{"127.0.0.2", ports[0]}, {"127.0.0.3", ports[1]}};
  ZmqOptions options = tcp_only();
  options.handshake_interval = std::chrono::milliseconds(30000);
  auto a = make_zmq_transport(0, endpoints, options);
  auto b = make_zmq_transport(1, endpoints, options);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  introduce({a->get(), b->get()});
  std::vector<std::byte> got;
  REQUIRE((*a)->send(1, 1, as_span("to 127.0.0.3")).ok());
  REQUIRE((*b)->recv(0, 1, &got, in_ms(10000)).ok());
  REQUIRE((*b)->send(0, 1, as_span("to 127.0.0.2")).ok());
  REQUIRE((*a)->recv(1, 1, &got, in_ms(10000)).ok());
  const int stranger = connect_from("127.0.0.9", "127.0.0.2", ports[0]);
  const int listed = connect_from("127.0.0.3", "127.0.0.2", ports[0]);
  REQUIRE(stranger >= 0);
  REQUIRE(listed >= 0);
  CHECK(closed_within(stranger, 5000));
  CHECK_FALSE(closed_within(listed, 1000));
  ::close(stranger);
  ::close(listed);
  // The ranks' own connections were never touched.
  REQUIRE((*a)->send(1, 2, as_span("still")).ok());
  CHECK((*b)->recv(0, 2, &got, in_ms(10000)).ok());
}

TEST_CASE("ranks connect from their listed addresses only while one address's connections fit its ports") {
  using zmq_internal::source_binding_fits;
  auto cluster = [](int addresses, int ranks_each) {
    std::vector<ResolvedEndpoint> resolved;
    for (int a = 0; a < addresses; ++a)
      for (int r = 0; r < ranks_each; ++r)
        resolved.push_back(ResolvedEndpoint{fmt::format("tcp://10.0.{}.{}:{}", a / 256, a % 256, 9000 + r), false});
    return resolved;
  };
  CHECK(source_binding_fits(cluster(128, 8)));   // 8 x 1,023 connections from each address
  CHECK(source_binding_fits(cluster(1, 128)));   // 128 x 127 = 16,256
  CHECK_FALSE(source_binding_fits(cluster(1, 129)));  // 129 x 128 = 16,512
  // 8 ranks a machine: up to 2,048 ranks in all (8 x 2,047 = 16,376).
  CHECK(source_binding_fits(cluster(256, 8)));
  CHECK_FALSE(source_binding_fits(cluster(257, 8)));
}
