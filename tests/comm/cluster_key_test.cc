// Cluster keys: the key file, the derived CURVE pairs, client keys (the keyed
// data plane: tests/comm/sealed_transport_test.cc).
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

TEST_CASE("a node's routing id names its rank and is new for each process; others name none") {
  const std::string id = node_routing_id(3);
  CHECK(id.rfind("node-3.", 0) == 0);
  CHECK(id.size() == 7 + 16);
  CHECK(node_routing_id(3) != id);
  CHECK(routing_id_rank(id) == 3);
  CHECK(routing_id_rank("node-12") == 12);
  for (const char* other : {"node-", "node-x", "node-1x", "node-01", "client", "", "node-1234567890", "Node-1"})
    CHECK_MESSAGE(routing_id_rank(other) == -1, other);
}
