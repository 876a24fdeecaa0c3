// The keyed data plane (comm/data_cipher.h): ranks holding the cluster key
// and each other's session ids exchange messages and run collectives; a rank
// with another key, or none, delivers nothing; a sealed frame counts only on
// its own link, once, under the current sessions; garbage that names a rank
// never costs that rank its link; collectives leave their checksum to a
// sealed link, and only to one.
#include <cstring>
#include <thread>

#include <zmq.hpp>

#include "comm/cluster_key.h"
#include "comm/collectives.h"
#include "comm/counting_transport.h"
#include "comm/data_cipher.h"
#include "comm/zap_authenticator.h"
#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

std::shared_ptr<const ClusterKey> fresh_key() {
  auto key = generate_cluster_key();
  REQUIRE(key.ok());
  return std::make_shared<const ClusterKey>(*key);
}

ZmqOptions keyed(std::shared_ptr<const ClusterKey> key) {
  ZmqOptions options = tcp_only();  // every message crosses TCP, sealed
  options.key = std::move(key);
  return options;
}

// A sealed frame as a rank writes it (comm/zmq_transport.cc): the clear part
// (magic "LDES", sender, tag, counter), the tag of the message, then the
// sealed bytes.
struct SealedHeader {
  uint32_t magic = 0x5345444c;
  uint32_t from = 0;
  uint64_t tag = 0;
  uint64_t counter = 0;
  uint8_t mac[kSealTagBytes] = {};
};
static_assert(sizeof(SealedHeader) == 40);

std::string sealed_frame(Sealer& sealer, uint32_t from, uint64_t tag, const std::string& payload) {
  SealedHeader header;
  header.from = from;
  header.tag = tag;
  header.counter = sealer.next_counter();
  std::string frame(sizeof header + payload.size(), '\0');
  auto* out = reinterpret_cast<std::byte*>(frame.data());
  std::memcpy(out, &header, sizeof header);
  REQUIRE(sealer.seal(header.counter, std::span<const std::byte>(out, offsetof(SealedHeader, mac)), as_span(payload),
                      out + sizeof header, {}, nullptr, header.mac));
  std::memcpy(out + offsetof(SealedHeader, mac), header.mac, sizeof header.mac);
  return frame;
}

// Sealed transports on `endpoints`, each given the others' session ids.
std::vector<std::unique_ptr<Transport>> sealed_world(const std::vector<Endpoint>& endpoints,
                                                     std::shared_ptr<const ClusterKey> key) {
  std::vector<std::unique_ptr<Transport>> out;
  for (size_t r = 0; r < endpoints.size(); ++r) {
    auto t = make_zmq_transport(static_cast<int>(r), endpoints, keyed(key));
    REQUIRE(t.ok());
    out.push_back(std::move(*t));
  }
  for (auto& t : out)
    for (auto& peer : out) t->set_peer_session(peer->rank(), *peer->session());
  return out;
}

// A hand-made writer to a data port on `port`: as rank `from` of `key`
// (the password of rank `to`'s process of session `to_session`), or, with
// no key, as a stranger (ZMTP's NULL handshake).
struct As {
  const ClusterKey* key = nullptr;
  int from = 0, to = 0;
  SessionId to_session{};
};
zmq::socket_t raw_push(zmq::context_t& context, int port, const As& as = {}) {
  zmq::socket_t socket(context, zmq::socket_type::push);
  socket.set(zmq::sockopt::linger, 1000);
  if (as.key != nullptr) data_port_client(socket, *as.key, as.from, as.to, as.to_session);
  socket.connect(fmt::format("tcp://127.0.0.1:{}", port));
  return socket;
}

// Waits up to 5 s for `transport` to have refused `n` handshakes.
bool refused_at_least(const Transport& transport, int64_t n) {
  for (int i = 0; i < 500 && transport.refused_handshakes() < n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return transport.refused_handshakes() >= n;
}

// Waits up to 5 s for `transport` to have dropped `n` messages.
bool dropped_at_least(const Transport& transport, int64_t n) {
  for (int i = 0; i < 500 && transport.received_dropped() < n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return transport.received_dropped() >= n;
}

}  // namespace

TEST_CASE("sealed ranks exchange small and large messages, and collectives over them are exact") {
  auto transports = make_zmq_world(3, keyed(fresh_key()));
  for (auto& t : transports) REQUIRE(t->session() != nullptr);
  CHECK(*transports[0]->session() != *transports[1]->session());
  // A body past the inline size travels in a frame of its own, sealed into
  // a buffer of the transport's.
  std::string large(300000, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 131 + 7);
  auto statuses = run_ranks(3, [&](int rank) -> Status {
    for (int to = 0; to < 3; ++to) {
      if (to == rank) continue;
      RILL_RETURN_IF_ERROR(transports[rank]->send(to, 5, as_span(fmt::format("{}->{}", rank, to))));
      RILL_RETURN_IF_ERROR(transports[rank]->send(to, 6, as_span("head"), as_span(large)));
    }
    std::vector<std::byte> got;
    for (int from = 0; from < 3; ++from) {
      if (from == rank) continue;
      RILL_RETURN_IF_ERROR(transports[rank]->recv(from, 5, &got, in_ms(10000)));
      if (as_string(got) != fmt::format("{}->{}", from, rank)) return internal_error("wrong message at {}", rank);
      RILL_RETURN_IF_ERROR(transports[rank]->recv(from, 6, &got, in_ms(10000)));
      if (as_string(got) != "head" + large) return internal_error("wrong large message at {}", rank);
    }
    // A 3 MiB all-reduce in 1 MiB chunks: sums of small integers are exact
    // in float, whatever the order.
    Collectives collectives(*transports[rank], CollectiveOptions{});
    std::vector<float> in(3 << 18), out(in.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i % 97) * (rank + 1));
    RILL_RETURN_IF_ERROR(collectives.all_reduce(in, out, 100));
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != static_cast<float>((i % 97) * 6)) return internal_error("rank {}: element {} is {}", rank, i, out[i]);
    return Status::ok_status();
  });
  check_all_ok(statuses);
  for (auto& t : transports) CHECK(t->received_dropped() == 0);
}

TEST_CASE("sessions given at start open what a peer sends before the receiver's start has returned") {
  // As the rendezvous does: every rank's session id is known before any
  // transport starts, so a rank that starts sooner may send at once. The
  // receiver is never given a session later (set_peer_session): only the
  // ids in its options can open what arrives.
  auto key = fresh_key();
  auto endpoints = loopback_endpoints(free_ports(2));
  const std::vector<SessionId> sessions = {new_session_id(), new_session_id()};
  ZmqOptions sender_options = keyed(key);
  sender_options.session = sessions[1];
  sender_options.peer_sessions = sessions;
  auto sender = make_zmq_transport(1, endpoints, sender_options);
  REQUIRE(sender.ok());
  REQUIRE((*sender)->send(0, 7, as_span("early")).ok());  // queued until rank 0 listens
  ZmqOptions receiver_options = keyed(key);
  receiver_options.session = sessions[0];
  receiver_options.peer_sessions = sessions;
  auto receiver = make_zmq_transport(0, endpoints, receiver_options);
  REQUIRE(receiver.ok());
  std::vector<std::byte> got;
  REQUIRE((*receiver)->recv(1, 7, &got, in_ms(10000)).ok());
  CHECK(as_string(got) == "early");
  CHECK((*receiver)->received_dropped() == 0);
}

TEST_CASE("a rank with another key, or none, delivers nothing to sealed ranks") {
  for (bool none : {false, true}) {
    CAPTURE(none);
    auto endpoints = loopback_endpoints(free_ports(2));
    auto rank0 = make_zmq_transport(0, endpoints, keyed(fresh_key()));
    REQUIRE(rank0.ok());
    auto rank1 = make_zmq_transport(1, endpoints, none ? tcp_only() : keyed(fresh_key()));
    REQUIRE(rank1.ok());
    if (!none) {
      (*rank0)->set_peer_session(1, *(*rank1)->session());
      (*rank1)->set_peer_session(0, *(*rank0)->session());
    }
    REQUIRE((*rank1)->send(0, 5, as_span("forged")).ok());
    std::vector<std::byte> got;
    CHECK((*rank0)->recv(1, 5, &got, in_ms(1000)).code() == Code::kDeadlineExceeded);
    // Refused at the handshake: its password is another key's, or it has
    // none; nothing it sends is read.
    CHECK(refused_at_least(**rank0, 1));
    CHECK((*rank0)->received_dropped() == 0);
    CHECK_FALSE((*rank0)->peer_lost(1));
  }
}

TEST_CASE("a rank sends to none whose session it was not given") {
  auto endpoints = loopback_endpoints(free_ports(2));
  auto key = fresh_key();
  auto rank0 = make_zmq_transport(0, endpoints, keyed(key));
  REQUIRE(rank0.ok());
  Status sent = (*rank0)->send(1, 5, as_span("too early"));
  CHECK(sent.code() == Code::kUnavailable);
  CHECK(sent.message().find("no session with it yet") != std::string::npos);
}

TEST_CASE("a sealed frame counts on its own link only, once, under the current sessions") {
  auto key = fresh_key();
  auto endpoints = loopback_endpoints(free_ports(3));
  auto transports = sealed_world(endpoints, key);
  const SessionId s0 = *transports[0]->session(), s2 = *transports[2]->session();
  // What only a holder of the key can make, written by hand to rank 0's
  // data port: frames sealed for the link from rank 2 to rank 0.
  zmq::context_t context;
  zmq::socket_t writer = raw_push(context, endpoints[0].port, As{key.get(), 2, 0, s0});
  Sealer link20(link_key(*key, 2, 0, s2, s0));
  const std::string truthful = sealed_frame(link20, 2, 9, "from rank 2");
  const std::string claims_one = sealed_frame(link20, 1, 9, "claims rank 1");  // sealed for 2 -> 0
  Sealer stale(link_key(*key, 2, 0, s2, new_session_id()));                  // for another rank 0 process
  const std::string old_session = sealed_frame(stale, 2, 9, "for another incarnation");
  for (const std::string* frame : {&truthful, &truthful, &claims_one, &old_session})
    REQUIRE(writer.send(zmq::buffer(*frame), zmq::send_flags::none));
  std::vector<std::byte> got;
  REQUIRE(transports[0]->recv(2, 9, &got, in_ms(10000)).ok());
  CHECK(as_string(got) == "from rank 2");
  CHECK(dropped_at_least(*transports[0], 3));  // the replay, the false sender, the other session
  CHECK(transports[0]->recv(2, 9, &got, in_ms(300)).code() == Code::kDeadlineExceeded);
  CHECK(transports[0]->recv(1, 9, &got, in_ms(300)).code() == Code::kDeadlineExceeded);
  CHECK(transports[0]->received_dropped() == 3);
  // Rank 2 itself goes on: its counters are its own, above the hand-made one.
  REQUIRE(transports[2]->send(0, 9, as_span("rank 2 itself")).ok());
  // The transport's first counter (1) was used by the hand-made frame: its
  // first message is refused as a replay, its second arrives.
  REQUIRE(transports[2]->send(0, 9, as_span("rank 2 again")).ok());
  REQUIRE(transports[0]->recv(2, 9, &got, in_ms(10000)).ok());
  CHECK(as_string(got) == "rank 2 again");
}

TEST_CASE("garbage that names a rank is dropped and never costs that rank its link") {
  auto key = fresh_key();
  auto endpoints = loopback_endpoints(free_ports(3));
  auto transports = sealed_world(endpoints, key);
  zmq::context_t context;
  // Past the handshake with rank 1's password: only a key holder gets there.
  zmq::socket_t noisy = raw_push(context, endpoints[0].port, As{key.get(), 1, 0, *transports[0]->session()});
  SealedHeader garbage;
  garbage.from = 2;
  garbage.tag = 9;
  for (int i = 0; i < 150; ++i) {
    garbage.counter = static_cast<uint64_t>(i + 1);
    std::string frame(reinterpret_cast<const char*>(&garbage), sizeof garbage);
    frame += std::string(64, 'x');
    REQUIRE(noisy.send(zmq::buffer(frame), zmq::send_flags::none));
  }
  CHECK(dropped_at_least(*transports[0], 150));
  REQUIRE(transports[2]->send(0, 9, as_span("still heard")).ok());
  std::vector<std::byte> got;
  REQUIRE(transports[0]->recv(2, 9, &got, in_ms(10000)).ok());
  CHECK(as_string(got) == "still heard");
  CHECK_FALSE(transports[0]->peer_lost(2));
}

TEST_CASE("a data port reads nothing from whoever lacks a rank's password for its process") {
  // A stranger on a listed address (another local user: 127.0.0.1 is every
  // rank's here) that sent a frame announcing 64 MiB would have made the
  // rank hold it; refused at the handshake, nothing it sends is read. Each
  // writer: ZMTP's NULL handshake; a rank's name with a made-up password;
  // another key's password; the right key's for an earlier process of rank
  // 0 (another session).
  auto key = fresh_key();
  auto endpoints = loopback_endpoints(free_ports(3));
  auto transports = sealed_world(endpoints, key);
  const SessionId s0 = *transports[0]->session();
  auto other_key = fresh_key();
  zmq::context_t context;
  std::vector<zmq::socket_t> writers;
  writers.push_back(raw_push(context, endpoints[0].port));
  writers.emplace_back(context, zmq::socket_type::push);
  writers.back().set(zmq::sockopt::linger, 0);
  writers.back().set(zmq::sockopt::plain_username, std::string("node-2"));
  writers.back().set(zmq::sockopt::plain_password, std::string(64, '0'));
  writers.back().connect(fmt::format("tcp://127.0.0.1:{}", endpoints[0].port));
  writers.push_back(raw_push(context, endpoints[0].port, As{other_key.get(), 2, 0, s0}));
  writers.push_back(raw_push(context, endpoints[0].port, As{key.get(), 2, 0, new_session_id()}));
  const std::string big(64 << 20, 'x');
  for (auto& writer : writers) {
    writer.set(zmq::sockopt::linger, 0);
    (void)writer.send(zmq::buffer(big), zmq::send_flags::dontwait);
  }
  CHECK(refused_at_least(*transports[0], 4));
  std::vector<std::byte> got;
  CHECK(transports[0]->recv(2, 9, &got, in_ms(300)).code() == Code::kDeadlineExceeded);
  CHECK(transports[0]->received_dropped() == 0);
  // The ranks themselves are admitted.
  REQUIRE(transports[2]->send(0, 9, as_span("rank 2")).ok());
  REQUIRE(transports[0]->recv(2, 9, &got, in_ms(10000)).ok());
  CHECK(as_string(got) == "rank 2");
  CHECK_FALSE(transports[0]->peer_lost(2));
}

TEST_CASE("a rank's port first held by a process without the key: once the rank itself listens there, messages flow") {
  // A stranger that held the port for a while (an agent started without the
  // key, then stopped) does not cut the link for good: the transport dials
  // it again.
  auto endpoints = loopback_endpoints(free_ports(2));
  auto key = fresh_key();
  auto context = std::make_unique<zmq::context_t>();
  auto impostor = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::pull);
  impostor->set(zmq::sockopt::linger, 0);
  impostor->bind(fmt::format("tcp://127.0.0.1:{}", endpoints[1].port));
  ZmqOptions options = keyed(key);
  options.heartbeat_timeout = std::chrono::milliseconds(5000);  // bounds a send that finds no connection
  auto rank0 = make_zmq_transport(0, endpoints, options);
  REQUIRE(rank0.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  impostor.reset();
  context.reset();  // waits for the socket to close: the port is free
  auto rank1 = make_zmq_transport(1, endpoints, options);
  REQUIRE_MESSAGE(rank1.ok(), rank1.status().message());
  (*rank0)->set_peer_session(1, *(*rank1)->session());
  (*rank1)->set_peer_session(0, *(*rank0)->session());
  std::vector<std::byte> got;
  // Both ways: rank 1 never met the impostor, rank 0 did.
  REQUIRE((*rank1)->send(0, 7, as_span("from rank 1")).ok());
  REQUIRE((*rank0)->recv(1, 7, &got, in_ms(10000)).ok());
  CHECK(as_string(got) == "from rank 1");
  Status sent = (*rank0)->send(1, 8, as_span("from rank 0"));
  REQUIRE_MESSAGE(sent.ok(), sent.message());
  Status received = (*rank1)->recv(0, 8, &got, in_ms(10000));
  REQUIRE_MESSAGE(received.ok(), received.message());
  CHECK(as_string(got) == "from rank 0");
}

TEST_CASE("a restarted rank's new session: the others take it and talk to the new process; the same session again "
          "changes nothing") {
  auto key = fresh_key();
  auto endpoints = loopback_endpoints(free_ports(3));
  auto transports = sealed_world(endpoints, key);
  std::vector<std::byte> got;
  REQUIRE(transports[1]->send(0, 3, as_span("before")).ok());
  REQUIRE(transports[0]->recv(1, 3, &got, in_ms(10000)).ok());
  REQUIRE(transports[0]->send(1, 3, as_span("before")).ok());
  REQUIRE(transports[1]->recv(0, 3, &got, in_ms(10000)).ok());
  // Given again on rank 0 alone (as a master does for every rank when one
  // rejoins), rank 1's own session leaves the link's counters where they
  // are, both ways.
  transports[0]->set_peer_session(1, *transports[1]->session());
  REQUIRE(transports[1]->send(0, 3, as_span("after the same session")).ok());
  REQUIRE(transports[0]->recv(1, 3, &got, in_ms(10000)).ok());
  CHECK(as_string(got) == "after the same session");
  REQUIRE(transports[0]->send(1, 3, as_span("to rank 1")).ok());
  REQUIRE(transports[1]->recv(0, 3, &got, in_ms(10000)).ok());
  CHECK(as_string(got) == "to rank 1");
  // Rank 2's process is replaced by a new one on the same endpoint.
  transports[2]->close();
  transports[2].reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto again = make_zmq_transport(2, endpoints, keyed(key));
  REQUIRE(again.ok());
  transports[2] = std::move(*again);
  for (int r : {0, 1}) {
    transports[2]->set_peer_session(r, *transports[r]->session());
    transports[r]->set_peer_session(2, *transports[2]->session());
    transports[r]->revive(2);
  }
  for (int r : {0, 1}) {
    REQUIRE(transports[r]->send(2, 4, as_span(fmt::format("{} to the new rank 2", r))).ok());
    REQUIRE(transports[2]->send(r, 4, as_span(fmt::format("the new rank 2 to {}", r))).ok());
  }
  for (int r : {0, 1}) {
    REQUIRE(transports[2]->recv(r, 4, &got, in_ms(10000)).ok());
    CHECK(as_string(got) == fmt::format("{} to the new rank 2", r));
    REQUIRE(transports[r]->recv(2, 4, &got, in_ms(10000)).ok());
    CHECK(as_string(got) == fmt::format("the new rank 2 to {}", r));
  }
  // And 0 and 1 still talk as before.
  REQUIRE(transports[0]->send(1, 5, as_span("still")).ok());
  REQUIRE(transports[1]->recv(0, 5, &got, in_ms(10000)).ok());
  for (int r : {0, 1, 2}) CHECK(transports[r]->received_dropped() == 0);
}

namespace {

// A transport that says its links are sealed when they are not (what a
// sender must never do): its collectives send chunks without checksums.
class ClaimsSealed final : public CountingTransport {
 public:
  using CountingTransport::CountingTransport;
  bool seals(int) const override { return true; }
};

}  // namespace

TEST_CASE("collectives send no checksum over sealed links, and take none missing from a message that was not sealed") {
  // Sealed: the ranks of a keyed world (TCP) say so, locally shared memory
  // does not.
  auto sealed = make_zmq_world(2, keyed(fresh_key()));
  CHECK(sealed[0]->seals(1));
  ZmqOptions shared = keyed(fresh_key());
  shared.shared_memory = true;
  auto local = make_zmq_world(2, shared);
  CHECK_FALSE(local[0]->seals(1));
  CHECK_FALSE(make_inproc_transports(2)[0]->seals(1));

  // Rank 1 claims a sealed link over in-process queues: rank 0 refuses its
  // chunks rather than take them unchecked.
  auto plain = make_inproc_transports(2);
  ClaimsSealed liar(std::move(plain[1]));
  Transport* ranks[2] = {plain[0].get(), &liar};
  auto statuses = run_ranks(2, [&](int rank) -> Status {
    CollectiveOptions options;
    options.timeout = std::chrono::milliseconds(3000);
    Collectives collectives(*ranks[rank], options);
    std::vector<float> in(1024, 1.0f), out(in.size());
    return collectives.all_reduce(in, out, 7);
  });
  CHECK(statuses[0].code() == Code::kDataLoss);
  CHECK(statuses[0].message().find("came without a checksum, and not sealed") != std::string::npos);
}
