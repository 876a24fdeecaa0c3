// Each peer's connection of the ZeroMQ transport: its socket monitor's
// events, loss reported after a grace, revival, and dialling again after a
// failed handshake; its session id, which keys its link and names its
// shared-memory inbox; and which connections the data port keeps.
#include <algorithm>
#include <cstring>
#include <map>

#include <spdlog/spdlog.h>

#include "comm/zmq_transport_impl.h"

namespace rill::comm::zmq_internal {

void ZmqTransport::set_peer_session(int rank, const SessionId& session) {
  if (rank < 0 || rank >= world() || rank == rank_) return;
  // All zeros is no session: a name everyone could foresee.
  if (lanes_ && session != SessionId{}) lanes_->set_peer_name(rank, inbox_name(options_.shm_name_prefix, session));
  if (!options_.key) return;
  Peer& peer = *peers_[rank];
  {
    MutexLock lock(peer.mu);
    // The same session again changes nothing: new keys would restart the
    // counters, and the peer would take what follows for replays.
    if (peer.sealer && peer.session == session) {
      try {
        dial(peer);  // moved (set_peer_endpoint) since: dialled where it is now
      } catch (const zmq::error_t& e) {
        spdlog::warn("rank {}: dialling {} failed: {}", rank_, where(rank), e.what());
      }
      return;
    }
    peer.session = session;
    peer.sealer = std::make_unique<Sealer>(link_key(*options_.key, rank_, rank, session_, session));
    // The peer's data port admits this process with a password for its
    // session (comm/zap_authenticator.h): dialled again with the new one.
    if (peer.socket) {
      try {
        hang_up(peer);
        data_port_client(peer.socket, *options_.key, rank_, rank, session);
        dial(peer);
      } catch (const zmq::error_t& e) {
        spdlog::warn("rank {}: dialling {} failed: {}", rank_, where(rank), e.what());
      }
    }
  }
  MutexLock lock(peer.open_mu);
  peer.opener = std::make_unique<Opener>(link_key(*options_.key, rank, rank_, session, session_));
}

Status ZmqTransport::set_peer_endpoint(int rank, const Endpoint& endpoint) {
  if (rank < 0 || rank >= world() || rank == rank_)
    return invalid_argument("rank {}: cannot move rank {}: not a peer (world {})", rank_, rank, world());
  RILL_ASSIGN_OR_RETURN(ResolvedEndpoint resolved, resolve_endpoint(endpoint, rank));
  const std::string host = url_host(resolved.url);
  if (host == "0.0.0.0" || host == "[::]" || host == "[::ffff:0.0.0.0]")
    return invalid_argument("rank {}: rank {} cannot be reached at the wildcard address {}", rank_, rank,
                            endpoint.address);
  // Every rank's socket speaks one family (ZMQ_IPV6 is set per socket at
  // start, and a rank connects from its own address).
  if (resolved.ipv6 != own_ipv6_)
    return invalid_argument("rank {}: rank {} at {} is of another address family than this rank's {}", rank_, rank,
                            endpoint.address, own_.address);
  if (closed_.load(std::memory_order_acquire))
    return Status(Code::kUnavailable, fmt::format("rank {}: transport closed", rank_));
  const std::string peer = resolved.url.substr(resolved.url.find("://") + 3);
  Peer& p = *peers_[rank];
  {
    MutexLock lock(p.mu);
    if (p.peer == peer) return Status::ok_status();
    try {
      hang_up(p);
      p.peer = peer;
      p.url = listed_only_ ? fmt::format("tcp://{}:0;{}", listed_hosts_[rank_], peer) : resolved.url;
      // With a key, dialled once its session gives the password
      // (set_peer_session): the process that listens there now is a new one.
      if (!options_.key) dial(p);
    } catch (const zmq::error_t& e) {
      return Status(Code::kUnavailable,
                    fmt::format("rank {}: cannot dial rank {} at {}: {}", rank_, rank, peer, e.what()));
    }
  }
  {
    MutexLock lock(endpoints_mu_);
    endpoints_[rank] = endpoint;
  }
  // Away from the endpoint it started at, its own transport has no lanes
  // (ZmqOptions::listed_endpoint): it talks TCP.
  if (lanes_) lanes_->set_away(rank, peer != listed_peers_[rank]);
  if (listed_only_) {
    {
      MutexLock lock(admit_mu_);
      current_hosts_[rank] = host;
      admitted_changed_ = true;
    }
    MutexLock lock(close_mu_);
    if (!torn_down_ && wake_send_) {
      try {
        zmq::message_t wake;
        (void)wake_send_.send(wake, zmq::send_flags::dontwait);
      } catch (const zmq::error_t&) {
        // The poll timeout wakes the thread anyway.
      }
    }
  }
  spdlog::info("rank {}: rank {} is at {}:{} now", rank_, rank, endpoint.address, endpoint.port);
  return Status::ok_status();
}

void ZmqTransport::admit_moved() {
  std::vector<std::string> hosts;
  {
    MutexLock lock(admit_mu_);
    if (!admitted_changed_) return;
    admitted_changed_ = false;
    hosts = current_hosts_;
  }
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  listener_->set_admitted(std::move(hosts));
}

void ZmqTransport::mark_lost(int peer, const std::string& reason) {
  if (peers_[peer]->lost.exchange(true, std::memory_order_acq_rel)) return;
  spdlog::warn("rank {}: {}", rank_, reason);
  mailbox_.mark_lost(peer, reason);
}

void ZmqTransport::dial(Peer& p) {
  if (p.dialled || !p.socket) return;
  p.socket.connect(p.url);
  p.dialled = true;
}

void ZmqTransport::hang_up(Peer& p) {
  if (!p.dialled || !p.socket) return;
  p.dialled = false;
  try {
    p.socket.disconnect(p.url);
  } catch (const zmq::error_t&) {
    // Already gone.
  }
}

void ZmqTransport::redial() {
  const auto now = Clock::now();
  for (auto& peer : peers_) {
    Peer& p = *peer;
    if (p.redial_at == Clock::time_point{} || now < p.redial_at) continue;
    p.redial_at = {};
    MutexLock lock(p.mu);
    // With a key, not before the peer's session gives its password.
    if (options_.key && !p.sealer) continue;
    try {
      dial(p);
    } catch (const zmq::error_t& e) {
      spdlog::warn("rank {}: dialling {} again failed: {}", rank_, p.url, e.what());
    }
  }
}

void ZmqTransport::drain_monitor(int peer) {
  Peer& p = *peers_[peer];
  while (true) {
    zmq::message_t event;
    if (!p.monitor.recv(event, zmq::recv_flags::dontwait)) return;
    zmq::message_t address;
    if (event.more()) (void)p.monitor.recv(address, zmq::recv_flags::none);
    if (event.size() < sizeof(uint16_t)) continue;
    uint16_t id;
    std::memcpy(&id, event.data(), sizeof id);
    uint32_t value = 0;  // CONNECTED: the connection's socket
    if (event.size() >= sizeof id + sizeof value) std::memcpy(&value, static_cast<const char*>(event.data()) + sizeof id, sizeof value);
    if (id == ZMQ_EVENT_CONNECTED) {
      // Which connection this is, read while it is new (ZeroMQ may close
      // the descriptor later; then the port read now no longer matches).
      p.local_port.store(local_port_of(static_cast<int>(value)), std::memory_order_relaxed);
      p.fd.store(static_cast<int>(value), std::memory_order_release);
      p.loss_pending = false;
      p.connected_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    } else if (id == ZMQ_EVENT_DISCONNECTED && p.connected_ns.load(std::memory_order_relaxed) != 0) {
      p.fd.store(-1, std::memory_order_release);
      p.connected_ns.store(0, std::memory_order_release);
      p.loss_pending = true;
      p.lost_at = Clock::now() + options_.peer_lost_grace;
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
               id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      // ZeroMQ does not dial again after a failed handshake (a process of
      // another key, or none, held the peer's port): the connection would
      // stay dead, and sends to the peer would find no connection. Dial
      // again after a pause (redial()).
      if (!p.redial_logged)
        spdlog::warn("rank {}: the handshake with whatever listens at {} failed ({}); dialling again", rank_,
                     where(peer), id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "refused" : "not a node of this cluster");
      p.redial_logged = true;
      // A connection that never passed its handshake carried nothing: its
      // end, which follows, is not the peer's loss (a peer revived while
      // this side still dialled with its old session's password stays up).
      p.fd.store(-1, std::memory_order_release);
      p.connected_ns.store(0, std::memory_order_release);
      {
        // Its session is over; the address leaves the socket until redial().
        MutexLock lock(p.mu);
        hang_up(p);
      }
      p.redial_at = Clock::now() + kRedialPause;
    } else if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      p.redial_logged = false;
    }
  }
}

std::vector<std::optional<TcpLinkCounters>> ZmqTransport::link_counters() const {
  std::vector<std::optional<TcpLinkCounters>> out(peers_.size());
  if (closed_.load(std::memory_order_acquire)) return out;
  for (size_t peer = 0; peer < peers_.size(); ++peer) {
    if (static_cast<int>(peer) == rank_ || !peers_[peer] || (lanes_ && lanes_->is_local(static_cast<int>(peer)))) continue;
    // The socket library may close the descriptor at any time: read_tcp_link
    // checks it is still a connection to the peer, and a connection that
    // came up again while it was read is not counted (its counters started
    // over).
    Peer& p = *peers_[peer];
    const int64_t connection = p.connected_ns.load(std::memory_order_acquire);
    if (connection == 0) continue;
    const int fd = p.fd.load(std::memory_order_acquire);
    std::string address;
    {
      MutexLock lock(p.mu);
      address = p.peer;
    }
    std::optional<TcpLinkCounters> read = read_tcp_link(fd, address, p.local_port.load(std::memory_order_relaxed));
    if (!read || p.connected_ns.load(std::memory_order_acquire) != connection) continue;
    read->connection = connection;
    out[peer] = read;
  }
  return out;
}

std::string url_host(const std::string& url) {
  const size_t start = url.find("://") == std::string::npos ? 0 : url.find("://") + 3;
  return url.substr(start, url.rfind(':') - start);
}

bool source_binding_fits(const std::vector<ResolvedEndpoint>& resolved) {
  std::map<std::string, int64_t> ranks;  // by address
  int64_t most = 0;
  for (const ResolvedEndpoint& r : resolved) most = std::max(most, ++ranks[url_host(r.url)]);
  return most * (static_cast<int64_t>(resolved.size()) - 1) <= kMostBoundConnections;
}

void ZmqTransport::watch_listener(const std::vector<ResolvedEndpoint>& resolved) {
  const Endpoint& own = own_;
  listener_ = std::make_unique<HandshakeWatch>(
      context_, pull_, fmt::format("rank {}: data port {}:{}", rank_, own.address, own.port), options_.key != nullptr,
      /*server=*/true);
  ConnectionLimits limits;
  // With a key a connection past its handshake gave a rank's password: only
  // those still in their handshake count (a stranger's flood is cut by its
  // own newer connections, and never holds a rank's share). Without one the
  // handshake proves nothing: every open connection counts, and the peers
  // that connected first keep theirs.
  if (options_.key) limits.young = options_.handshake_interval;
  limits.per_address = options_.max_connections_per_address > 0 ? options_.max_connections_per_address : world() + 16;
  limits.total = options_.max_connections > 0 ? options_.max_connections : 4 * world() + 64;
  listed_only_ = options_.listed_peers_only;
  if (listed_only_ && !source_binding_fits(resolved)) {
    listed_only_ = false;
    if (rank_ == 0)
      spdlog::warn("data plane: {} ranks, too many connections from one address to give each its own port of it "
                   "(more than {}): ranks connect from any address, and data ports admit every address (their "
                   "connection limits still hold)",
                   resolved.size(), kMostBoundConnections);
  }
  for (const ResolvedEndpoint& r : resolved) {
    const std::string host = url_host(r.url);
    // A wildcard's connections come from any address; an IPv6 listener sees
    // IPv4 peers as [::ffff:a.b.c.d], and a rank cannot connect from an
    // address of the other family.
    listed_only_ = listed_only_ && host != "0.0.0.0" && host != "[::]" && host != "[::ffff:0.0.0.0]" &&
                   r.ipv6 == resolved[rank_].ipv6;
    if (std::find(limits.admitted.begin(), limits.admitted.end(), host) == limits.admitted.end())
      limits.admitted.push_back(host);
  }
  if (!listed_only_) limits.admitted.clear();
  listener_->limit_connections(own.port, limits);
}

void ZmqTransport::report_losses() {
  auto now = Clock::now();
  for (int peer = 0; peer < world(); ++peer) {
    Peer& p = *peers_[peer];
    if (p.revived.exchange(false, std::memory_order_acq_rel)) {
      p.loss_pending = false;
    }
    if (!p.loss_pending || now < p.lost_at) continue;
    drain_data();  // what the peer sent before it went away comes first
    if (lanes_ && lanes_->is_local(peer)) lanes_->drain(peer);
    p.loss_pending = false;
    mark_lost(peer, fmt::format("connection to {} was lost", where(peer)));
  }
}

// The PUSH socket reconnects by itself to the restarted process's endpoint;
// the monitor sees that as CONNECTED. A disconnect of the old connection
// reported before is forgotten here; one still to come is cleared by that
// CONNECTED event within the grace.
void ZmqTransport::revive(int peer) {
  if (peer < 0 || peer >= world() || peer == rank_ || closed_.load(std::memory_order_acquire)) return;
  Peer& p = *peers_[peer];
  p.revived.store(true, std::memory_order_release);
  p.cut_off.store(false, std::memory_order_release);
  if (lanes_ && lanes_->is_local(peer)) lanes_->revive(peer);
  mailbox_.revive(peer);
  if (p.lost.exchange(false, std::memory_order_acq_rel))
    spdlog::info("rank {}: {} is back", rank_, where(peer));
}

}  // namespace rill::comm::zmq_internal
