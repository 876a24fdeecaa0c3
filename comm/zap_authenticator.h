// Answers ZeroMQ's authentication requests (ZAP, RFC 27) for every server
// socket of one ZeroMQ context, on a thread of its own: a connection's
// handshake completes only once this says who the peer is, and a peer it
// refuses never gets past the handshake (nothing it sends is read).
// Two checks:
//  - curve_nodes: a CURVE peer whose public key is that of "node-0".."node-
//    (world-1)" or (if `admit_clients`) of "client" is admitted under that
//    name (the control port, the launcher's rendezvous: comm/cluster_key.h);
//  - data_port: a PLAIN peer naming itself "node-R" with the password
//    data_port_password(key, R, this rank, this rank's session) is admitted
//    as "node-R" (the data port: comm/zmq_transport.cc).
// Any other peer is refused and counted; the listener's HandshakeWatch
// (comm/cluster_key.h) logs it with its address.
// Create it before the context's server sockets bind; destroy it before the
// context.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "base/status.h"
#include "comm/cluster_key.h"
#include "comm/data_cipher.h"

namespace rill::comm {

// What a check says of one request: the identity admitted, or why not.
struct ZapVerdict {
  std::string identity;  // empty: refused
  std::string reason;    // why refused
};
// mechanism ("NULL", "PLAIN", "CURVE") and its credentials (PLAIN: user
// name, password; CURVE: the 32-byte public key).
using ZapCheck = std::function<ZapVerdict(std::string_view mechanism, const std::vector<zmq::message_t>& credentials)>;

ZapCheck curve_nodes(const ClusterKey& key, int world, bool admit_clients);
ZapCheck data_port(const ClusterKey& key, int rank, const SessionId& session, int world);

// The password rank `from` gives rank `to`'s data port: 64 hex digits of a
// keyed BLAKE2b, under the cluster's secret, of both ranks and the session
// id of `to`'s process, so it holds for that process only.
std::string data_port_password(const ClusterKey& key, int from, int to, const SessionId& to_session);
// Makes `socket` a data port that admits only PLAIN peers data_port()
// admits (before bind; a data_port ZapAuthenticator on its context).
void data_port_server(zmq::socket_t& socket);
// Makes `socket` (a PUSH of rank `from`) give rank `to`'s data port,
// whose process has session `to_session`, its password (before connect).
void data_port_client(zmq::socket_t& socket, const ClusterKey& key, int from, int to, const SessionId& to_session);

class ZapAuthenticator {
 public:
  // `where` names the port in errors and the log ("node-1: control port").
  static StatusOr<std::unique_ptr<ZapAuthenticator>> start(zmq::context_t& context, ZapCheck check, std::string where);
  // The control port's: curve_nodes(key, world, admit_clients).
  static StatusOr<std::unique_ptr<ZapAuthenticator>> start(zmq::context_t& context, const ClusterKey& key, int world,
                                                          bool admit_clients, std::string where) {
    return start(context, curve_nodes(key, world, admit_clients), std::move(where));
  }
  ~ZapAuthenticator();
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  int64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }

 private:
  ZapAuthenticator() = default;
  void loop();

  zmq::socket_t socket_;
  ZapCheck check_;
  std::string where_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0}, admitted_{0};
  std::thread thread_;
};

}  // namespace rill::comm
