#include "comm/zap_authenticator.h"

#include <charconv>
#include <cstring>

#include <fmt/format.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <zmq_addon.hpp>

namespace rill::comm {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kDataPortDomain = "rill-data";
constexpr std::string_view kDataPortPrefix = "rill-data-port-v1/";
constexpr size_t kPasswordHexDigits = 64;

// Printable and at most 64 characters: what a refusal's log line quotes of a
// name a stranger chose.
std::string printable_cut(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

}  // namespace

ZapCheck curve_nodes(const ClusterKey& key, int world, bool admit_clients) {
  auto known = std::make_shared<std::vector<std::pair<std::array<uint8_t, 32>, std::string>>>();
  for (int r = 0; r < world; ++r) known->emplace_back(derive_key_pair(key, node_identity(r)).public_key, node_identity(r));
  if (admit_clients) known->emplace_back(derive_key_pair(key, kClientIdentity).public_key, std::string(kClientIdentity));
  return [known](std::string_view mechanism, const std::vector<zmq::message_t>& credentials) -> ZapVerdict {
    if (mechanism != "CURVE" || credentials.size() != 1 || credentials[0].size() != 32)
      return {"", fmt::format("it does not use CURVE ({})", printable_cut(mechanism))};
    for (const auto& [public_key, name] : *known)
      if (std::memcmp(public_key.data(), credentials[0].data(), 32) == 0) return {name, ""};
    return {"", "its key is not one of this cluster's nodes'"};
  };
}

std::string data_port_password(const ClusterKey& key, int from, int to, const SessionId& to_session) {
  std::string message(kDataPortPrefix);
  for (int rank : {from, to})
    for (int i = 0; i < 4; ++i) message.push_back(static_cast<char>(static_cast<uint32_t>(rank) >> (8 * i)));
  message.append(reinterpret_cast<const char*>(to_session.data()), to_session.size());
  if (sodium_init() < 0) spdlog::critical("libsodium failed to initialise");
  std::array<uint8_t, kPasswordHexDigits / 2> digest{};
  crypto_generichash(digest.data(), digest.size(), reinterpret_cast<const unsigned char*>(message.data()),
                     message.size(), key.secret.data(), key.secret.size());
  std::string hex(kPasswordHexDigits + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), digest.data(), digest.size());
  hex.resize(kPasswordHexDigits);
  return hex;
}

ZapCheck data_port(const ClusterKey& key, int rank, const SessionId& session, int world) {
  auto secret = std::make_shared<const ClusterKey>(key);
  return [secret, rank, session, world](std::string_view mechanism,
                                        const std::vector<zmq::message_t>& credentials) -> ZapVerdict {
    if (mechanism != "PLAIN" || credentials.size() != 2)
      return {"", fmt::format("it does not give a rank's password ({})", printable_cut(mechanism))};
    const std::string_view user = credentials[0].to_string_view();
    int from = -1;
    if (user.size() > 5 && user.substr(0, 5) == "node-") {
      const auto [end, error] = std::from_chars(user.data() + 5, user.data() + user.size(), from);
      if (error != std::errc() || end != user.data() + user.size()) from = -1;
    }
    if (from < 0 || from >= world || from == rank)
      return {"", fmt::format("it names no other rank of this cluster ('{}')", printable_cut(user))};
    const std::string want = data_port_password(*secret, from, rank, session);
    const std::string_view given = credentials[1].to_string_view();
    if (given.size() != want.size() || sodium_memcmp(given.data(), want.data(), want.size()) != 0)
      return {"", fmt::format("its password is not {}'s for this process (another cluster key, or a session of "
                              "this rank's it does not know)",
                              node_identity(from))};
    return {node_identity(from), ""};
  };
}

void data_port_server(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::plain_server, 1);
  socket.set(zmq::sockopt::zap_domain, kDataPortDomain);
}

void data_port_client(zmq::socket_t& socket, const ClusterKey& key, int from, int to, const SessionId& to_session) {
  socket.set(zmq::sockopt::plain_username, node_identity(from));
  socket.set(zmq::sockopt::plain_password, data_port_password(key, from, to, to_session));
}

StatusOr<std::unique_ptr<ZapAuthenticator>> ZapAuthenticator::start(zmq::context_t& context, ZapCheck check,
                                                                     std::string where) {
  std::unique_ptr<ZapAuthenticator> zap(new ZapAuthenticator());
  zap->check_ = std::move(check);
  zap->where_ = std::move(where);
  try {
    zap->socket_ = zmq::socket_t(context, zmq::socket_type::rep);
    zap->socket_.set(zmq::sockopt::linger, 0);
    zap->socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return Status(Code::kInternal, fmt::format("{}: cannot start the authenticator: {}", zap->where_, e.what()));
  }
  zap->thread_ = std::thread([z = zap.get()] { z->loop(); });
  return zap;
}

ZapAuthenticator::~ZapAuthenticator() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

void ZapAuthenticator::loop() {
  while (!stop_.load(std::memory_order_acquire)) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, std::chrono::milliseconds(50));
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(socket_, std::back_inserter(request))) continue;
    // RFC 27: version, request id, domain, address, identity, mechanism,
    // credentials.
    if (request.size() < 6) continue;  // not ZeroMQ's own request: nothing to answer
    std::vector<zmq::message_t> credentials;
    for (size_t i = 6; i < request.size(); ++i) credentials.push_back(std::move(request[i]));
    const ZapVerdict verdict = check_(request[5].to_string_view(), credentials);
    (verdict.identity.empty() ? refused_ : admitted_).fetch_add(1, std::memory_order_relaxed);
    std::vector<zmq::message_t> reply;
    reply.emplace_back(std::string_view("1.0"));
    reply.emplace_back(request[1].data(), request[1].size());
    reply.emplace_back(std::string_view(verdict.identity.empty() ? "400" : "200"));
    reply.emplace_back(std::string_view(verdict.identity.empty() ? verdict.reason : "OK"));
    reply.emplace_back(verdict.identity.data(), verdict.identity.size());
    reply.emplace_back();
    (void)zmq::send_multipart(socket_, reply);
  }
}

}  // namespace rill::comm
