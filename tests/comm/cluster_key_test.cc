// Cluster keys: the key file, the derived CURVE pairs, and the data plane with
// a key: keyed ranks talk; a peer without the key, or with another, delivers
// nothing; a key holder connected as one rank cannot send as another.
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <zmq.hpp>

#include "comm/client_key.h"
#include "comm/cluster_key.h"
#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("rill-key-test-{}", ::getpid());
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Keyed transports for every rank, TCP only (no shared memory), so that each
// message crosses a CURVE connection.
std::vector<std::unique_ptr<Transport>> keyed_world(const std::vector<Endpoint>& endpoints,
                                                    std::vector<std::shared_ptr<const ClusterKey>> keys) {
  std::vector<std::unique_ptr<Transport>> out;
  for (size_t r = 0; r < endpoints.size(); ++r) {
    ZmqOptions options;
    options.shared_memory = false;
    options.key = keys[r];
    auto t = make_zmq_transport(static_cast<int>(r), endpoints, options);
    REQUIRE(t.ok());
    out.push_back(std::move(*t));
  }
  return out;
}

// A raw PUSH socket holding `key`, connected as `identity` to rank 0's
// data port at `port` (what a process of the cluster could do by hand).
zmq::socket_t connect_as(zmq::context_t& context, const ClusterKey& key, std::string_view identity, int port) {
  zmq::socket_t socket(context, zmq::socket_type::push);
  socket.set(zmq::sockopt::linger, 0);
  curve_client(socket, key, identity, 0);
  socket.connect(fmt::format("tcp://127.0.0.1:{}", port));
  return socket;
}

std::shared_ptr<const ClusterKey> fresh_key() {
  auto key = generate_cluster_key();
  REQUIRE(key.ok());
  return std::make_shared<const ClusterKey>(*key);
}

}  // namespace

TEST_CASE("a key file round-trips, is private, and bad ones are named") {
  const std::string path = temp_path("cluster.key");
  std::filesystem::remove(path);
  auto key = generate_cluster_key();
  REQUIRE(key.ok());
  REQUIRE(write_key_file(path, *key).ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto back = read_key_file(path);
  REQUIRE(back.ok());
  CHECK(*back == *key);
  // Never replaced by accident.
  Status again = write_key_file(path, *key);
  CHECK(again.code() == Code::kUnavailable);
  CHECK(again.message().find("exists") != std::string::npos);

  ::chmod(path.c_str(), 0644);
  auto open = read_key_file(path);
  REQUIRE(!open.ok());
  CHECK(open.status().message().find("chmod 600") != std::string::npos);

  const std::string bad = temp_path("bad.key");
  { std::ofstream(bad) << "# comment\nnot-a-key\n"; }
  ::chmod(bad.c_str(), 0600);
  auto parsed = read_key_file(bad);
  REQUIRE(!parsed.ok());
  CHECK(parsed.status().message().find(bad + ":2") != std::string::npos);
  CHECK(read_key_file(temp_path("missing.key")).status().code() == Code::kNotFound);

  // A link where the key goes (planted by someone else) is never followed,
  // replacing or not: the file it names keeps its contents.
  const std::string victim = temp_path("victim.txt"), link = temp_path("planted.key");
  { std::ofstream(victim) << "mine\n"; }
  std::filesystem::create_symlink(victim, link);
  for (bool overwrite : {false, true}) {
    CAPTURE(overwrite);
    Status refused = write_key_file(link, *key, overwrite);
    CHECK(refused.code() == Code::kUnavailable);
    CHECK(refused.message().find(overwrite ? "symbolic link" : "exists") != std::string::npos);
  }
  std::ifstream kept(victim);
  std::string line;
  std::getline(kept, line);
  CHECK(line == "mine");
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("each identity has its own pair, the same from the same secret") {
  auto key = fresh_key();
  auto other = fresh_key();
  CurveKeyPair a = derive_key_pair(*key, "node-0");
  CHECK(a.public_key == derive_key_pair(*key, "node-0").public_key);
  CHECK(a.public_key != derive_key_pair(*key, "node-1").public_key);
  CHECK(a.public_key != derive_key_pair(*key, kClientIdentity).public_key);
  CHECK(a.public_key != derive_key_pair(*other, "node-0").public_key);
  CHECK(a.public_key != a.secret_key);
}

TEST_CASE("a client key: the clients' pair, the master's public key and the token, and nothing that makes a node") {
  auto key = fresh_key();
  const ClientKey client = client_key_of(*key);
  CHECK(client.pair.public_key == derive_key_pair(*key, kClientIdentity).public_key);
  CHECK(client.master_public == derive_key_pair(*key, node_identity(0)).public_key);
  CHECK(client.http_token == http_token(*key));
  const std::string path = temp_path("client.key");
  std::filesystem::remove(path);
  REQUIRE(write_client_key_file(path, client).ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(is_client_key_file(path));
  ::setenv(kKeyFileEnv, path.c_str(), 1);
  auto back = client_key_from_environment();
  REQUIRE(back.ok());
  CHECK(**back == client);
  // A cluster key file serves a client too, as its client key.
  const std::string cluster_path = temp_path("cluster-for-client.key");
  std::filesystem::remove(cluster_path);
  REQUIRE(write_key_file(cluster_path, *key).ok());
  CHECK_FALSE(is_client_key_file(cluster_path));
  ::setenv(kKeyFileEnv, cluster_path.c_str(), 1);
  auto derived = client_key_from_environment();
  REQUIRE(derived.ok());
  CHECK(**derived == client);
  ::unsetenv(kKeyFileEnv);
  // The file holds neither the secret nor any node's secret key.
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  auto z85_of = [](const std::array<uint8_t, 32>& bytes) {
    std::string out(41, '\0');
    zmq_z85_encode(out.data(), bytes.data(), bytes.size());
    out.resize(40);
    return out;
  };
  CHECK(text.find(z85_of(key->secret)) == std::string::npos);
  for (int r = 0; r < 4; ++r) CHECK(text.find(z85_of(derive_key_pair(*key, node_identity(r)).secret_key)) == std::string::npos);
  // An agent cannot take it for the cluster key.
  auto as_cluster = read_key_file(path);
  REQUIRE_FALSE(as_cluster.ok());
  CHECK(as_cluster.status().message().find("is a client key") != std::string::npos);
}

TEST_CASE("keyed ranks exchange messages; authenticated identities are the ranks'") {
  auto endpoints = loopback_endpoints(free_ports(3));
  auto key = fresh_key();
  auto transports = keyed_world(endpoints, {key, key, key});
  auto statuses = run_ranks(3, [&](int rank) -> Status {
    for (int to = 0; to < 3; ++to)
      if (to != rank) RILL_RETURN_IF_ERROR(transports[rank]->send(to, 5, as_span(fmt::format("{}->{}", rank, to))));
    std::vector<std::byte> got;
    for (int from = 0; from < 3; ++from) {
      if (from == rank) continue;
      RILL_RETURN_IF_ERROR(transports[rank]->recv(from, 5, &got, in_ms(10000)));
      if (as_string(got) != fmt::format("{}->{}", from, rank)) return internal_error("wrong message at {}", rank);
    }
    return Status::ok_status();
  });
  check_all_ok(statuses);
  for (auto& t : transports) CHECK(t->received_dropped() == 0);
}

TEST_CASE("a rank with another key, or none, delivers nothing to keyed ranks") {
  for (bool none : {false, true}) {
    CAPTURE(none);
    auto endpoints = loopback_endpoints(free_ports(2));
    auto key = fresh_key();
    auto transports = keyed_world(endpoints, {key, none ? nullptr : fresh_key()});
    (void)transports[1]->send(0, 5, as_span("forged"));
    std::vector<std::byte> got;
    // Nothing arrives: the wait ends at its deadline, or earlier once the
    // failed handshakes have the connection counted as lost.
    Status status = transports[0]->recv(1, 5, &got, in_ms(1500));
    CHECK((status.code() == Code::kDeadlineExceeded || status.code() == Code::kUnavailable));
    CHECK(transports[0]->received_dropped() == 0);
  }
}

TEST_CASE("a key holder connected as one rank cannot send as another: the sender field must be its rank") {
  auto endpoints = loopback_endpoints(free_ports(3));
  auto key = fresh_key();
  auto transports = keyed_world(endpoints, {key, key, key});
  // An intruder holding the key connects as node-2 and writes frames that
  // claim to come from rank 1.
  zmq::context_t context;
  zmq::socket_t intruder = connect_as(context, *key, node_identity(2), endpoints[0].port);
  uint32_t claims_one[4] = {0x5441444c, 1, 9, 0};
  intruder.send(zmq::buffer(claims_one, sizeof claims_one), zmq::send_flags::none);
  // The same identity telling the truth is heard.
  uint32_t truthful[4] = {0x5441444c, 2, 9, 0};
  intruder.send(zmq::buffer(truthful, sizeof truthful), zmq::send_flags::none);
  std::vector<std::byte> got;
  REQUIRE(transports[0]->recv(2, 9, &got, in_ms(10000)).ok());
  CHECK(transports[0]->recv(1, 9, &got, in_ms(300)).code() == Code::kDeadlineExceeded);
  CHECK(transports[0]->received_dropped() == 1);
  // A client's identity is not a node's: refused at the handshake.
  zmq::socket_t client = connect_as(context, *key, kClientIdentity, endpoints[0].port);
  client.send(zmq::buffer(truthful, sizeof truthful), zmq::send_flags::none);
  CHECK(transports[0]->recv(2, 9, &got, in_ms(500)).code() == Code::kDeadlineExceeded);
}

TEST_CASE("a key holder that keeps sending malformed messages is cut off, named") {
  auto endpoints = loopback_endpoints(free_ports(3));
  auto key = fresh_key();
  auto transports = keyed_world(endpoints, {key, key, key});
  zmq::context_t context;
  zmq::socket_t noisy = connect_as(context, *key, node_identity(2), endpoints[0].port);
  for (int i = 0; i < 100; ++i) noisy.send(zmq::buffer(std::string(40, 'x')), zmq::send_flags::none);
  uint32_t truthful[4] = {0x5441444c, 2, 9, 0};  // well formed, but too late
  noisy.send(zmq::buffer(truthful, sizeof truthful), zmq::send_flags::none);
  std::vector<std::byte> got;
  Status status = transports[0]->recv(2, 9, &got, in_ms(10000));
  CHECK(status.code() == Code::kUnavailable);
  CHECK(status.message().find("sent 100 malformed data-plane messages: cut off") != std::string::npos);
  CHECK(transports[0]->peer_lost(2));
  CHECK(!transports[0]->peer_lost(1));
}

TEST_CASE("a rank's port first held by a process without the key: once the rank itself listens there, messages flow") {
  // ZeroMQ gives up on an address after a failed handshake; the transport
  // dials it again, so a stranger that held the port for a while (an agent
  // started without the key, then stopped) does not cut the link for good.
  auto endpoints = loopback_endpoints(free_ports(2));
  auto key = fresh_key();
  auto context = std::make_unique<zmq::context_t>();
  auto impostor = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::pull);
  impostor->set(zmq::sockopt::linger, 0);
  impostor->bind(fmt::format("tcp://127.0.0.1:{}", endpoints[1].port));
  ZmqOptions options;
  options.shared_memory = false;
  options.key = key;
  options.heartbeat_timeout = std::chrono::milliseconds(5000);  // bounds a send that finds no connection
  auto rank0 = make_zmq_transport(0, endpoints, options);
  REQUIRE(rank0.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // handshakes with the impostor fail
  impostor.reset();
  context.reset();  // waits for the socket to close: the port is free
  auto rank1 = make_zmq_transport(1, endpoints, options);
  REQUIRE_MESSAGE(rank1.ok(), rank1.status().message());
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
