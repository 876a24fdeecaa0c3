// The ZeroMQ transport. Each rank binds one PULL socket on its endpoint and
// holds one PUSH socket per peer, so every ordered pair of ranks has its own
// TCP connection and ZeroMQ keeps per-pair order. A message is one or two
// frames: [meta | header | small body] and, for a large body, the body itself
// sent from the caller's memory without a copy.
//
// Peers on this machine (the same resolved address) are sent to through
// shared memory instead (comm/shm_lanes.h); their connections stay, for the
// monitor.
//
// With a cluster key every message over TCP is sealed (comm/data_cipher.h):
// the sender seals under the link's send lock, so counters leave in order;
// the receive thread opens in place before anything reads the message.
//
// Peer loss is seen by a socket monitor on each PUSH socket (disconnect after
// a connection, or a ZMTP heartbeat timeout), reported after a short grace so
// that bytes the peer sent before it went away are delivered first. Another
// monitor on the PULL socket bounds the connections it keeps (anyone may
// connect to a data port: its ZMTP handshake proves nothing).
//
// The class is shared by zmq_transport_start.cc (set-up), zmq_transport.cc
// (sending, receiving, closing) and zmq_transport_peers.cc (each peer's
// connection: loss, revival, redial, a move to another address).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <zmq.hpp>

#include "base/mutex.h"
#include "comm/cluster_key.h"
#include "comm/connection_guard.h"
#include "comm/data_cipher.h"
#include "comm/endpoint_resolve.h"
#include "comm/mailbox.h"
#include "comm/shm_lanes.h"
#include "comm/transport.h"
#include "comm/zap_authenticator.h"

namespace rill::comm::zmq_internal {

// The host of a ZeroMQ TCP address: "127.0.0.1" of "tcp://127.0.0.1:9989",
// "[::1]" of "tcp://[::1]:9989".
std::string url_host(const std::string& url);

// Whether ranks may connect from their own listed addresses
// (ZmqOptions::listed_peers_only): each such connection holds an ephemeral
// port of its source address (ZeroMQ binds the source without
// IP_BIND_ADDRESS_NO_PORT), so the connections from one address, its ranks
// times their peers, must fit well inside the ports a machine has (Linux's
// default range holds 28,232). Decided from the endpoints alone, so every
// rank decides alike: either all connect from their addresses and admit
// only listed ones, or none does.
constexpr int64_t kMostBoundConnections = 16384;
bool source_binding_fits(const std::vector<ResolvedEndpoint>& resolved);

class ZmqTransport final : public Transport {
 public:
  ZmqTransport(int rank, std::vector<Endpoint> endpoints, ZmqOptions options)
      : rank_(rank), world_(static_cast<int>(endpoints.size())), own_(endpoints[rank]),
        endpoints_(std::move(endpoints)), options_(options), mailbox_(rank, world_) {}
  ~ZmqTransport() override { close(); }

  Status start(const std::vector<ResolvedEndpoint>& resolved);

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  Status send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body,
              SendTracker* tracker) override;
  Status recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) override;
  void accept_tags(uint64_t lo, uint64_t hi) override { mailbox_.accept_tags(lo, hi); }
  void limit_message_bytes(size_t bytes) override { max_message_bytes_.store(bytes, std::memory_order_release); }
  size_t max_message_bytes() const override { return options_.max_message_bytes; }
  int64_t refused_handshakes() const override { return listener_ ? listener_->refused() : 0; }
  void limit_unread_bytes(size_t bytes) override { mailbox_.limit_unread_bytes(static_cast<int64_t>(bytes)); }
  void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) override {
    mailbox_.cancel_tags(lo, hi, reason);
  }
  bool peer_lost(int rank) const override {
    return rank >= 0 && rank < world() && rank != rank_ && peers_[rank] &&
           peers_[rank]->lost.load(std::memory_order_acquire);
  }
  void revive(int rank) override;
  const SessionId* session() const override { return &session_; }
  bool seals(int peer) const override { return options_.key && !(lanes_ && lanes_->is_local(peer)); }
  void set_peer_session(int rank, const SessionId& session) override;
  Status set_peer_endpoint(int rank, const Endpoint& endpoint) override;
  int64_t received_dropped() const override { return mailbox_.dropped() + malformed_.load(std::memory_order_relaxed); }
  int64_t handler_bytes_copied() const override { return handler_copied_.load(std::memory_order_relaxed); }
  std::vector<std::optional<TcpLinkCounters>> link_counters() const override;

  // Handlers run under handlers_mu_, so after this returns the old handler
  // is not called any more. An empty handler removes the tag's.
  void set_handler(uint64_t tag, Handler handler) override {
    MutexLock lock(handlers_mu_);
    if (handler) {
      handlers_[tag] = std::move(handler);
    } else {
      handlers_.erase(tag);
    }
    if (lanes_) lanes_->set_eager(!handlers_.empty());  // handlers are called at once
  }
  void close() override;

 private:
  struct Peer {
    Mutex mu;
    zmq::socket_t socket GUARDED_BY(mu);  // PUSH to the peer
    std::string url GUARDED_BY(mu);  // where `socket` connects
    bool dialled GUARDED_BY(mu) = false;  // `socket` connects to `url` (once: a second connect would be a second pipe)
    zmq::socket_t monitor;  // events of `socket`; receive thread only
    std::atomic<int64_t> connected_ns{0};  // when the connection came up (steady clock); 0: it is down
    std::atomic<int> fd{-1};  // the connection's socket while it is up (its monitor says which); -1: none
    std::atomic<uint16_t> local_port{0};  // that connection's own port: a reused descriptor is told apart
    std::string peer GUARDED_BY(mu);  // "address:port" of `url`: what `fd` must be connected to
    bool loss_pending = false;    // receive thread only
    Clock::time_point lost_at;    // receive thread only
    std::atomic<bool> lost{false};
    std::atomic<bool> revived{false};  // a pending loss report is void: the receive thread clears it
    // With a key, once the peer's session id is known: the link's sealer
    // (used under mu, so counters leave in order) and opener.
    std::unique_ptr<Sealer> sealer GUARDED_BY(mu);
    SessionId session GUARDED_BY(mu){};  // the peer's, which `sealer` and `opener` are for
    Mutex open_mu;
    std::unique_ptr<Opener> opener GUARDED_BY(open_mu);
    bool redial_logged = false;   // receive thread only
    Clock::time_point redial_at;  // receive thread only: when to dial again ({}: not pending)
    std::atomic<bool> cut_off{false};  // past its unread bound: what it sends is dropped until revived
  };
  static constexpr std::chrono::milliseconds kRedialPause{200};

  std::string where(int peer) const {
    MutexLock lock(endpoints_mu_);
    return fmt::format("rank {} ({}:{})", peer, endpoints_[peer].address, endpoints_[peer].port);
  }
  // The TCP path of send (every peer of another machine, local ones whose
  // shared memory is not visible here).
  Status send_tcp(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body,
                  SendTracker* tracker);
  void receive_loop();
  void drain_data();
  // Opens a sealed message from `from` in place; false: not sealed for
  // this link (or replayed), drop it.
  bool open_sealed(int from, zmq::message_t& first, zmq::message_t* second);
  void dispatch(zmq::message_t& first, zmq::message_t* second);
  // Passes a message to its tag's handler; false when the tag has none.
  bool to_handler(int from, uint64_t tag, MessageView message);
  // A message from the shared-memory lanes.
  void deliver(int from, uint64_t tag, std::span<const std::byte> bytes, std::unique_ptr<BytesHolder> keep);
  void mark_lost(int peer, const std::string& reason);
  // Queues a message no handler took; a peer past its bound of unread
  // bytes is cut off.
  void to_mailbox(int from, uint64_t tag, Received message);
  void drain_monitor(int peer);
  // Watches the listening socket's connections and handshakes (throws
  // zmq::error_t), bounding them (comm/connection_guard.h).
  void watch_listener(const std::vector<ResolvedEndpoint>& resolved);
  // Connects `p`'s socket to its url, unless it does already.
  void dial(Peer& p) REQUIRES(p.mu);
  // Leaves `p`'s url until dial() (ZeroMQ would dial it again by itself).
  void hang_up(Peer& p) REQUIRES(p.mu);
  // Dials the peers whose handshake failed, once their pause is over.
  void redial();
  void report_losses();
  // The data port admits the ranks' hosts as they are now, once
  // set_peer_endpoint moved one (receive thread: the guard is its own).
  void admit_moved();

  const int rank_;
  const int world_;
  const Endpoint own_;  // this rank's endpoint, which never moves
  mutable Mutex endpoints_mu_;
  std::vector<Endpoint> endpoints_ GUARDED_BY(endpoints_mu_);  // every rank's, as moved by set_peer_endpoint
  std::vector<std::string> listed_hosts_;  // every rank's resolved host at start (set in start())
  std::vector<std::string> listed_peers_;  // and its "host:port" (set in start())
  bool own_ipv6_ = false;                  // this rank's endpoint is IPv6 (set in start())
  Mutex admit_mu_;
  // Every rank's host now: the addresses the data port admits
  // (admit_moved(), where it admits listed ones only).
  std::vector<std::string> current_hosts_ GUARDED_BY(admit_mu_);
  bool admitted_changed_ GUARDED_BY(admit_mu_) = false;
  const ZmqOptions options_;
  zmq::context_t context_;  // one per transport: the receiving side's sockets; terminated last
  // The PUSH sockets to the peers and their monitors, in a context of their
  // own: close() ends it first, so what this rank sent has left before its
  // PULL socket closes (a peer takes that connection's end for this rank's
  // loss: it must not come while data is still on its way).
  zmq::context_t push_context_;
  SessionId session_{};     // this rank's session id: its inbox's name, and with a key its links' keys
  size_t meta_bytes_ = 0;   // the clear part that begins each TCP frame
  zmq::socket_t pull_;      // receive thread only (after start)
  std::unique_ptr<HandshakeWatch> listener_;  // pull_'s connections; polled by the receive thread
  std::unique_ptr<ZapAuthenticator> zap_;   // with a key: pull_'s handshakes (a socket of context_)
  bool listed_only_ = false;  // ZmqOptions::listed_peers_only, unless an endpoint is a wildcard; set in start()
  zmq::socket_t wake_recv_, wake_send_;
  std::vector<std::unique_ptr<Peer>> peers_;
  Mailbox mailbox_;
  std::unique_ptr<ShmLanes> lanes_;  // null without peers on this machine
  Mutex handlers_mu_;
  std::unordered_map<uint64_t, Handler> handlers_ GUARDED_BY(handlers_mu_);
  std::vector<std::byte> scratch_ GUARDED_BY(handlers_mu_);  // an aligned first part for handlers
  std::thread receiver_;
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> malformed_{0};        // malformed messages dropped
  std::atomic<size_t> max_message_bytes_{0};  // 0: no limit
  std::atomic<int64_t> handler_copied_{0};   // bytes moved to scratch_ for handlers
  int64_t malformed_at_last_log_ = 0;         // receive thread only
  Clock::time_point last_malformed_log_{};    // receive thread only
  Mutex close_mu_;
  bool torn_down_ GUARDED_BY(close_mu_) = false;
};

}  // namespace rill::comm::zmq_internal
