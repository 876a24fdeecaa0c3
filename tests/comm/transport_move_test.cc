// A rank whose process comes back at another address (a standby machine, a
// pod given a new IP): the others move it (Transport::set_peer_endpoint),
// admit its new address on their data ports, send to it there, keyed or
// not, over TCP where it shared their machine before, and take it back
// onto shared memory when it returns to the address it started at.
#include <chrono>
#include <thread>

#include "comm/cluster_key.h"
#include "tests/comm/comm_test_util.h"
#include "tests/comm/socket_probe.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

void wait_lost(const std::vector<std::unique_ptr<Transport>>& t, int lost) {
  for (int peer = 0; peer < static_cast<int>(t.size()); ++peer) {
    if (peer == lost) continue;
    const auto until = in_ms(10000);
    while (!t[peer]->peer_lost(lost) && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(t[peer]->peer_lost(lost));
  }
}

// Rank `moved`'s old process goes, and a new one starts at `at`; the
// others move it, take its session and revive it, as the agents do on
// Rejoined.
void restart_at(std::vector<std::unique_ptr<Transport>>& t, std::vector<Endpoint> endpoints, int moved,
                const Endpoint& at, const ZmqOptions& options) {
  t[moved].reset();
  wait_lost(t, moved);
  endpoints[moved] = at;
  auto made = make_zmq_transport(moved, endpoints, options);
  REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  t[moved] = std::move(made).value();
  for (int peer = 0; peer < static_cast<int>(t.size()); ++peer) {
    if (peer == moved) continue;
    const Status status = t[peer]->set_peer_endpoint(moved, at);
    REQUIRE_MESSAGE(status.ok(), status.to_string());
  }
  introduce(t);
  for (int peer = 0; peer < static_cast<int>(t.size()); ++peer)
    if (peer != moved) t[peer]->revive(moved);
}

// Every rank sends `moved` a small and a large message, and gets one back.
void talk(const std::vector<std::unique_ptr<Transport>>& t, int moved, uint64_t tag) {
  const std::string large(3 << 20, 'x');  // a zero-copy frame over TCP, several records through a ring
  std::vector<std::byte> got;
  for (int peer = 0; peer < static_cast<int>(t.size()); ++peer) {
    if (peer == moved) continue;
    CAPTURE(peer);
    REQUIRE(t[peer]->send(moved, tag, as_span(large)).ok());
    Status s = t[moved]->recv(peer, tag, &got, in_ms(10000));
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    CHECK(got.size() == large.size());
    REQUIRE(t[moved]->send(peer, tag, as_span("from the moved rank")).ok());
    s = t[peer]->recv(moved, tag, &got, in_ms(10000));
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    CHECK(as_string(got) == "from the moved rank");
  }
}

}  // namespace

// The ranks listen on addresses of their own, so each data port admits the
// listed addresses only and each rank connects from its own: rank 2's new
// address must be admitted on the others' ports, or what it sends never
// arrives.
TEST_CASE("zmq: a rank started again at another address is moved by the others, keyed or not, and its address admitted") {
  for (bool with_key : {false, true}) {
    CAPTURE(with_key);
    ZmqOptions options = tcp_only();
    if (with_key) {
      auto key = generate_cluster_key();
      REQUIRE(key.ok());
      options.key = std::make_shared<const ClusterKey>(*key);
    }
    const auto ports = free_ports(4);
    const std::vector<Endpoint> endpoints = {{"127.0.0.2", ports[0]}, {"127.0.0.3", ports[1]}, {"127.0.0.4", ports[2]}};
    std::vector<std::unique_ptr<Transport>> t;
    for (int rank = 0; rank < 3; ++rank) {
      auto made = make_zmq_transport(rank, endpoints, options);
      REQUIRE_MESSAGE(made.ok(), made.status().to_string());
      t.push_back(std::move(made).value());
    }
    introduce(t);
    talk(t, 2, 1);
    const Endpoint at{"127.0.0.5", ports[3]};
    restart_at(t, endpoints, 2, at, options);
    talk(t, 2, 2);
    // The others go on among themselves as before.
    std::vector<std::byte> got;
    REQUIRE(t[0]->send(1, 3, as_span("still")).ok());
    CHECK(t[1]->recv(0, 3, &got, in_ms(10000)).ok());
    // Its new address is admitted on rank 0's port; a stranger's still is
    // not, nor its old one, which no rank holds now.
    const int stranger = connect_from("127.0.0.9", "127.0.0.2", ports[0]);
    const int old = connect_from("127.0.0.4", "127.0.0.2", ports[0]);
    const int moved = connect_from("127.0.0.5", "127.0.0.2", ports[0]);
    REQUIRE(stranger >= 0);
    REQUIRE(old >= 0);
    REQUIRE(moved >= 0);
    CHECK(closed_within(stranger, 5000));
    CHECK(closed_within(old, 5000));
    ::close(old);
    // Unkeyed, a connection is kept until ZMTP's handshake interval; keyed,
    // until its password is due: both well past this.
    CHECK_FALSE(closed_within(moved, 300));
    ::close(stranger);
    ::close(moved);
  }
}

// On one machine the ranks talk through shared memory. A rank away from
// its listed endpoint (ZmqOptions::listed_endpoint) starts without lanes,
// so the others send to it over TCP at once: they would
// otherwise wait for its inbox, here for a minute, before falling back;
// back at its own address, they take it back onto shared memory (no TCP
// link counted).
TEST_CASE("zmq: a rank that shared the machine talks TCP once moved away, and shared memory again once back") {
  const auto ports = free_ports(4);
  const std::vector<Endpoint> endpoints = loopback_endpoints({ports[0], ports[1], ports[2]});
  ZmqOptions patient;
  patient.shm_fallback_after = std::chrono::milliseconds(60000);
  std::vector<std::unique_ptr<Transport>> t;
  for (int rank = 0; rank < 3; ++rank) {
    auto made = make_zmq_transport(rank, endpoints, patient);
    REQUIRE_MESSAGE(made.ok(), made.status().to_string());
    t.push_back(std::move(made).value());
  }
  introduce(t);
  talk(t, 2, 1);
  CHECK_FALSE(t[0]->link_counters()[2].has_value());  // shared memory
  ZmqOptions away = ZmqOptions{};
  away.listed_endpoint = endpoints[2];
  restart_at(t, endpoints, 2, Endpoint{"127.0.0.6", ports[3]}, away);
  talk(t, 2, 2);
  for (int peer : {0, 1}) {
    CAPTURE(peer);
    const auto until = in_ms(5000);  // the connection's monitor event may follow its first message
    while (!t[peer]->link_counters()[2].has_value() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(t[peer]->link_counters()[2].has_value());  // over TCP
    CHECK_FALSE(t[peer]->link_counters()[1 - peer].has_value());  // the others still share memory
  }
  // Its new process finds the others' inbox names gone (they go once every
  // rank attached): it falls back to TCP itself after the default second.
  restart_at(t, endpoints, 2, endpoints[2], ZmqOptions{});
  talk(t, 2, 3);
  CHECK_FALSE(t[0]->link_counters()[2].has_value());
  CHECK_FALSE(t[1]->link_counters()[2].has_value());
}

TEST_CASE("zmq: a move to a wildcard, another family, a name that does not resolve or itself is refused, naming it") {
  auto t = make_zmq_world(2, tcp_only());
  const int port = free_ports(1)[0];
  Status s = t[0]->set_peer_endpoint(1, {"0.0.0.0", port});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("wildcard") != std::string::npos);
  s = t[0]->set_peer_endpoint(1, {"::1", port});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("another address family") != std::string::npos);
  s = t[0]->set_peer_endpoint(1, {"no-such-host.invalid", port});
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("no-such-host.invalid") != std::string::npos);
  CHECK(t[0]->set_peer_endpoint(0, {"127.0.0.1", port}).code() == Code::kInvalidArgument);
  CHECK(t[0]->set_peer_endpoint(5, {"127.0.0.1", port}).code() == Code::kInvalidArgument);
  // Refused moves changed nothing.
  std::vector<std::byte> got;
  REQUIRE(t[0]->send(1, 1, as_span("unmoved")).ok());
  CHECK(t[1]->recv(0, 1, &got, in_ms(10000)).ok());
  auto inproc = make_inproc_transports(2);
  s = inproc[0]->set_peer_endpoint(1, {"127.0.0.1", port});
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message().find("no addresses") != std::string::npos);
}
