#include "comm/client_key.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <zmq.h>

namespace rill::comm {
namespace {

constexpr std::string_view kClientKeyHeader =
    "# A Rill client key: submits, watches and stops the jobs of one cluster; it holds no node's key. Keep it private.";

std::string z85_of(const std::array<uint8_t, 32>& bytes) {
  std::string out(41, '\0');
  zmq_z85_encode(out.data(), bytes.data(), bytes.size());
  out.resize(40);
  return out;
}

bool z85_into(const std::string& text, std::array<uint8_t, 32>* out) {
  return text.size() == 40 && zmq_z85_decode(out->data(), text.c_str()) != nullptr;
}

// The first line that is not a comment, and its number (0: none).
std::pair<std::string, int> first_line(std::ifstream& in) {
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty() && line[0] != '#') return {line, number};
  }
  return {"", 0};
}

StatusOr<ClientKey> read_client_key_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Status(Code::kNotFound, fmt::format("key file {}: {}", path, std::strerror(errno)));
  if ((st.st_mode & 077) != 0)
    return invalid_argument("key file {} is open to other users (mode {:04o}): run chmod 600 {}", path,
                            st.st_mode & 07777, path);
  std::ifstream in(path);
  if (!in) return Status(Code::kUnavailable, fmt::format("key file {}: cannot read it", path));
  ClientKey key;
  bool client = false, master = false;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    const std::string field = line.substr(0, space), value = space == std::string::npos ? "" : line.substr(space + 1);
    bool ok = true;
    if (field == "client") {
      ok = z85_into(value, &key.pair.secret_key);
      client = ok;
    } else if (field == "client-public") {
      ok = z85_into(value, &key.pair.public_key);
    } else if (field == "master") {
      ok = z85_into(value, &key.master_public);
      master = ok;
    } else if (field == "token") {
      key.http_token = value;
      ok = value.size() == 32;
    } else {
      ok = false;
    }
    if (!ok)
      return invalid_argument("key file {}:{}: '{}' is not a line of a client key (client, client-public, master or "
                              "token with its value)",
                              path, number, field);
  }
  if (!client || !master || key.http_token.empty())
    return invalid_argument("key file {}: a client key needs its client, master and token lines", path);
  return key;
}

}  // namespace

ClientKey client_key_of(const ClusterKey& key) {
  return ClientKey{derive_key_pair(key, kClientIdentity), derive_key_pair(key, node_identity(0)).public_key,
                   http_token(key)};
}

Status write_client_key_file(const std::string& path, const ClientKey& key, bool overwrite) {
  return write_private_file(
      path,
      fmt::format("{}\nclient {}\nclient-public {}\nmaster {}\ntoken {}\n", kClientKeyHeader,
                  z85_of(key.pair.secret_key), z85_of(key.pair.public_key), z85_of(key.master_public), key.http_token),
      overwrite);
}

bool is_client_key_file(const std::string& path) {
  std::ifstream in(path);
  return in && first_line(in).first.rfind("client ", 0) == 0;
}

StatusOr<std::shared_ptr<const ClientKey>> client_key_from_environment() {
  const char* path = std::getenv(kKeyFileEnv);
  if (path == nullptr || *path == '\0') return std::shared_ptr<const ClientKey>();
  if (is_client_key_file(path)) {
    auto key = read_client_key_file(path);
    if (!key.ok()) return key.status().with_context(kKeyFileEnv);
    return std::make_shared<const ClientKey>(*key);
  }
  auto cluster = key_from_environment();
  if (!cluster.ok()) return cluster.status();
  return std::make_shared<const ClientKey>(client_key_of(**cluster));
}

void curve_client(zmq::socket_t& socket, const ClientKey& key) {
  socket.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(key.master_public.data(), key.master_public.size()));
  socket.set(zmq::sockopt::curve_publickey, zmq::const_buffer(key.pair.public_key.data(), key.pair.public_key.size()));
  socket.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(key.pair.secret_key.data(), key.pair.secret_key.size()));
}

}  // namespace rill::comm
