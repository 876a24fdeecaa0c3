// The ZeroMQ transport's set-up: its listening socket and guard, each
// peer's socket and monitor, the shared-memory lanes to the ranks of this
// machine, and the factory.
#include <algorithm>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "comm/cluster_key.h"
#include "comm/endpoint_resolve.h"
#include "comm/shm_lanes.h"
#include "comm/zap_authenticator.h"
#include "comm/zmq_frame.h"
#include "comm/zmq_transport_impl.h"

namespace rill::comm::zmq_internal {

Status ZmqTransport::start(const std::vector<ResolvedEndpoint>& resolved) {
  const Endpoint& own = own_;
  try {
    context_.set(zmq::ctxopt::io_threads, options_.io_threads);
    // Each peer takes three sockets (its PUSH and the two ends of its
    // monitor): ZeroMQ's default of 1,023 per context would refuse worlds
    // past 340 ranks.
    context_.set(zmq::ctxopt::max_sockets, std::max(1023, 3 * world() + 64));
    push_context_.set(zmq::ctxopt::io_threads, options_.io_threads);
    push_context_.set(zmq::ctxopt::max_sockets, std::max(1023, 3 * world() + 64));
    pull_ = zmq::socket_t(context_, zmq::socket_type::pull);
    pull_.set(zmq::sockopt::linger, 0);
    pull_.set(zmq::sockopt::rcvhwm, options_.receive_hwm);
    pull_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_message_bytes));
    pull_.set(zmq::sockopt::ipv6, resolved[rank_].ipv6 ? 1 : 0);
    pull_.set(zmq::sockopt::handshake_ivl, static_cast<int>(options_.handshake_interval.count()));
    own_ipv6_ = resolved[rank_].ipv6;
    for (const ResolvedEndpoint& r : resolved) {
      listed_hosts_.push_back(url_host(r.url));
      listed_peers_.push_back(r.url.substr(r.url.find("://") + 3));
    }
    {
      MutexLock lock(admit_mu_);
      current_hosts_ = listed_hosts_;
    }
    watch_listener(resolved);  // before the bind: no connection goes unseen
    meta_bytes_ = options_.key ? sizeof(SealedMeta) : sizeof(FrameMeta);
    session_ = options_.session == SessionId{} ? new_session_id() : options_.session;
    if (options_.key) {
      // Only a rank with this process's password gets past the handshake
      // (comm/zap_authenticator.h): a stranger's frames are never read.
      auto zap = ZapAuthenticator::start(context_, data_port(*options_.key, rank_, session_, world()),
                                         fmt::format("rank {}: data port {}:{}", rank_, own.address, own.port));
      if (!zap.ok()) return zap.status();
      zap_ = std::move(zap).value();
      data_port_server(pull_);
    }
    try {
      pull_.bind(resolved[rank_].url);
    } catch (const zmq::error_t& e) {
      if (e.num() == EADDRINUSE) {
        return Status(Code::kUnavailable, fmt::format("address {}:{} is already in use", own.address, own.port));
      }
      if (e.num() == EADDRNOTAVAIL) {
        return Status(Code::kUnavailable,
                      fmt::format("address {}:{} is not an address of this machine", own.address, own.port));
      }
      return Status(Code::kUnavailable, fmt::format("cannot bind {}:{}: {}", own.address, own.port, e.what()));
    }
    wake_recv_ = zmq::socket_t(context_, zmq::socket_type::pair);
    wake_recv_.set(zmq::sockopt::linger, 0);
    wake_recv_.bind("inproc://wake");
    wake_send_ = zmq::socket_t(context_, zmq::socket_type::pair);
    wake_send_.set(zmq::sockopt::linger, 0);
    wake_send_.connect("inproc://wake");
    for (int peer = 0; peer < world(); ++peer) {
      peers_.push_back(std::make_unique<Peer>());
      if (peer == rank_) continue;
      Peer& p = *peers_.back();
      MutexLock lock(p.mu);  // no other thread sees it yet
      p.socket = zmq::socket_t(push_context_, zmq::socket_type::push);
      p.socket.set(zmq::sockopt::linger, 0);
      p.socket.set(zmq::sockopt::sndhwm, 0);
      p.socket.set(zmq::sockopt::ipv6, resolved[peer].ipv6 ? 1 : 0);
      p.socket.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(options_.heartbeat_interval.count()));
      p.socket.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(options_.heartbeat_timeout.count()));
      std::string monitor_url = fmt::format("inproc://monitor-{}", peer);
      if (zmq_socket_monitor(p.socket.handle(), monitor_url.c_str(),
                             ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                 ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0) {
        throw zmq::error_t();
      }
      p.monitor = zmq::socket_t(push_context_, zmq::socket_type::pair);
      p.monitor.set(zmq::sockopt::linger, 0);
      p.monitor.connect(monitor_url);
      p.url = resolved[peer].url;
      p.peer = p.url.substr(p.url.find("://") + 3);
      // From this rank's own address (ZeroMQ's "source;destination"): the
      // address the peer admits.
      if (listed_only_) p.url = fmt::format("tcp://{}:0;{}", url_host(resolved[rank_].url), p.peer);
      // With a key, dialled once the peer's session id gives its password
      // (set_peer_session): nothing is sent to it before then.
      if (!options_.key) dial(p);
    }
  } catch (const zmq::error_t& e) {
    return Status(Code::kUnavailable, fmt::format("rank {}: ZeroMQ set-up failed: {}", rank_, e.what()));
  }
  // Away from its entry of the machine list, a rank's peers send to it over
  // TCP (set_peer_endpoint): it has no lanes either.
  bool away = false;
  if (!options_.listed_endpoint.address.empty()) {
    auto listed = resolve_endpoint(options_.listed_endpoint, rank_);
    away = !listed.ok() || listed->url != resolved[rank_].url;
  }
  if (options_.shared_memory && !away) {
    // Same machine: the same resolved address ("tcp://127.0.0.1" of
    // "tcp://127.0.0.1:9990"). Inboxes are named after session ids, which
    // peers learn from set_peer_session.
    auto host = [](const std::string& url) { return url.substr(0, url.rfind(':')); };
    std::vector<bool> local(static_cast<size_t>(world_), false);
    bool any = false;
    std::string locals;
    for (size_t r = 0; r < local.size(); ++r) {
      local[r] = static_cast<int>(r) != rank_ && host(resolved[r].url) == host(resolved[rank_].url);
      any = any || local[r];
      if (local[r]) locals += fmt::format("{}{}", locals.empty() ? "" : ", ", r);
    }
    if (any) {
      auto lanes = ShmLanes::start(
          rank_, std::move(local), inbox_name(options_.shm_name_prefix, session_), options_,
          [this](int from, uint64_t tag, std::span<const std::byte> bytes, std::unique_ptr<BytesHolder> keep) {
            deliver(from, tag, bytes, std::move(keep));
          },
          [this](int from, const std::string& reason) { mark_lost(from, reason); },
          [this](int peer) { return peer_lost(peer); },
          [this](uint64_t tag) {
            MutexLock lock(handlers_mu_);
            return handlers_.count(tag) != 0;
          },
          [this](int peer) -> Clock::duration {
            const int64_t since = peers_[peer]->connected_ns.load(std::memory_order_acquire);
            return since == 0 ? Clock::duration::zero() : Clock::now() - Clock::time_point(Clock::duration(since));
          },
          [this](int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body) {
            return send_tcp(to, tag, header, body, nullptr);
          });
      if (lanes.ok()) {
        lanes_ = std::move(*lanes);
        if (options_.log_shared_memory)
          spdlog::info("rank {}: rank(s) {} share this address: messages to them go through shared memory", rank_,
                       locals);
      } else if (lanes.status().code() == Code::kInvalidArgument) {
        return lanes.status().with_context(fmt::format("rank {}", rank_));
      } else {
        // Its local peers find no inbox of this rank's (or refuse the one
        // under its name) and send over TCP; so does it.
        spdlog::warn("rank {}: no shared memory: {}; the ranks of this machine talk to it over TCP", rank_,
                     lanes.status().message());
      }
    }
  }
  for (size_t r = 0; r < options_.peer_sessions.size() && r < peers_.size(); ++r)
    set_peer_session(static_cast<int>(r), options_.peer_sessions[r]);
  receiver_ = std::thread([this] { receive_loop(); });
  if (lanes_) lanes_->set_receive_thread(receiver_.get_id());
  return Status::ok_status();
}

}  // namespace rill::comm::zmq_internal

namespace rill::comm {

StatusOr<std::unique_ptr<Transport>> make_zmq_transport(int rank, std::vector<Endpoint> endpoints,
                                                        ZmqOptions options) {
  const int world = static_cast<int>(endpoints.size());
  if (world == 0) return invalid_argument("data-plane transport: the endpoint list is empty");
  if (rank < 0 || rank >= world) return invalid_argument("data-plane transport: rank {} is not in 0..{}", rank, world - 1);
  std::vector<ResolvedEndpoint> resolved;
  for (int i = 0; i < world; ++i) {
    RILL_ASSIGN_OR_RETURN(ResolvedEndpoint r, resolve_endpoint(endpoints[i], i));
    resolved.push_back(std::move(r));
  }
  auto transport = std::make_unique<zmq_internal::ZmqTransport>(rank, std::move(endpoints), options);
  RILL_RETURN_IF_ERROR(transport->start(resolved));
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace rill::comm
