#include "comm/client_key.h"

#include "base/printable.h"

#include <cstdlib>

#include <fmt/format.h>
#include <sodium.h>

namespace rill::comm {
namespace {

constexpr std::string_view kClientKeyHeader =
    "# A Rill client key: submits, watches and stops the jobs of one cluster; it holds no node's key. Keep it private.";

StatusOr<ClientKey> read_client_key_file(const std::string& path) {
  RILL_ASSIGN_OR_RETURN(std::vector<KeyLine> lines, read_key_lines(path));
  ClientKey key;
  bool client = false, master = false;
  for (const KeyLine& line : lines) {
    const size_t space = line.text.find(' ');
    const std::string field = line.text.substr(0, space);
    const std::string_view value =
        space == std::string::npos ? std::string_view() : std::string_view(line.text).substr(space + 1);
    bool ok = false;
    if (field == "client") ok = client = z85_key(value, &key.pair.secret_key);
    else if (field == "master") ok = master = z85_key(value, &key.master_public);
    else if (field == "token") {
      key.http_token = value;
      ok = value.size() == 32;
    }
    if (!ok)
      return invalid_argument("key file {}:{}: {} is not a line of a client key (client, master or token with its "
                              "value)",
                              path, line.number, excerpt(field));
  }
  if (!client || !master || key.http_token.empty())
    return invalid_argument("key file {}: a client key needs its client, master and token lines", path);
  // The public half follows from the secret one (Curve25519).
  if (sodium_init() < 0 || crypto_scalarmult_base(key.pair.public_key.data(), key.pair.secret_key.data()) != 0)
    return invalid_argument("key file {}: its client line is not a Curve25519 secret key", path);
  return key;
}

}  // namespace

ClientKey client_key_of(const ClusterKey& key) {
  return ClientKey{derive_key_pair(key, kClientIdentity), derive_key_pair(key, node_identity(0)).public_key,
                   http_token(key)};
}

Status write_client_key_file(const std::string& path, const ClientKey& key, bool overwrite) {
  return write_private_file(path,
                            fmt::format("{}\nclient {}\nmaster {}\ntoken {}\n", kClientKeyHeader,
                                        z85_key(key.pair.secret_key), z85_key(key.master_public), key.http_token),
                            overwrite);
}

bool is_client_key_file(const std::string& path) {
  auto lines = read_key_lines(path);
  return lines.ok() && !lines->empty() && lines->front().text.rfind("client ", 0) == 0;
}

StatusOr<std::shared_ptr<const ClientKey>> client_key_from_file(const std::string& path) {
  if (is_client_key_file(path)) {
    RILL_ASSIGN_OR_RETURN(ClientKey key, read_client_key_file(path));
    return std::make_shared<const ClientKey>(std::move(key));
  }
  RILL_ASSIGN_OR_RETURN(ClusterKey cluster, read_key_file(path));
  return std::make_shared<const ClientKey>(client_key_of(cluster));
}

StatusOr<std::shared_ptr<const ClientKey>> client_key_from_environment() {
  const char* path = std::getenv(kKeyFileEnv);
  if (path != nullptr && *path != '\0') {
    auto key = client_key_from_file(path);
    if (!key.ok()) return key.status().with_context(kKeyFileEnv);
    return key;
  }
  auto cluster = key_from_environment();  // the default one, or none
  if (!cluster.ok()) return cluster.status();
  if (!*cluster) return std::shared_ptr<const ClientKey>();
  return std::make_shared<const ClientKey>(client_key_of(**cluster));
}

void curve_client(zmq::socket_t& socket, const ClientKey& key) {
  socket.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(key.master_public.data(), key.master_public.size()));
  socket.set(zmq::sockopt::curve_publickey, zmq::const_buffer(key.pair.public_key.data(), key.pair.public_key.size()));
  socket.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(key.pair.secret_key.data(), key.pair.secret_key.size()));
}

}  // namespace rill::comm
