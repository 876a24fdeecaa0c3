// The ZeroMQ transport: sending, receiving and closing (what it is, and the
// class: zmq_transport_impl.h; each peer's connection: zmq_transport_peers.cc).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "base/mutex.h"
#include "comm/cluster_key.h"
#include "comm/endpoint_resolve.h"
#include "comm/mailbox.h"
#include "comm/shm_lanes.h"
#include "comm/transport.h"
#include "comm/zap_authenticator.h"
#include "comm/zmq_transport_impl.h"

namespace rill::comm::zmq_internal {
namespace {

constexpr uint32_t kMagic = 0x5441444c;        // "LDAT" little-endian: Rill data plane, version 1
constexpr uint32_t kSealedMagic = 0x5345444c;  // "LDES": the same, sealed (a keyed cluster)
struct FrameMeta {
  uint32_t magic;
  uint32_t from;
  uint64_t tag;
};
static_assert(sizeof(FrameMeta) == 16);
// A sealed frame's clear part (authenticated, not encrypted): the meta, the
// link's message counter and the tag of the whole message (first frame
// after this, then the second frame). 40 bytes: what follows stays 8-byte
// aligned.
struct SealedMeta {
  FrameMeta meta;
  uint64_t counter;
  uint8_t tag[kSealTagBytes];
};
static_assert(sizeof(SealedMeta) == 40);
// What the tag covers in the clear: the meta and the counter.
constexpr size_t kSealedClearBytes = offsetof(SealedMeta, tag);

// A received message's frames, kept while it waits in the mailbox. Holders
// are recycled through a process-wide free list, so steady traffic through
// the mailbox (collectives) allocates no holders.
struct ZmqHolder final : Received::Holder {
  zmq::message_t first;
  zmq::message_t second;

  static void* operator new(std::size_t size);
  static void operator delete(void* p);
};

struct HolderFreeList {
  static constexpr size_t kKept = 1024;  // beyond this many idle holders, freed
  Mutex mu;
  std::vector<void*> free GUARDED_BY(mu);
  ~HolderFreeList() {
    for (void* p : free) ::operator delete(p);
  }
};
HolderFreeList& holder_free_list() {
  static HolderFreeList list;
  return list;
}

void* ZmqHolder::operator new(std::size_t size) {
  HolderFreeList& list = holder_free_list();
  {
    MutexLock lock(list.mu);
    if (!list.free.empty()) {
      void* p = list.free.back();
      list.free.pop_back();
      return p;
    }
  }
  return ::operator new(size);
}

void ZmqHolder::operator delete(void* p) {
  HolderFreeList& list = holder_free_list();
  {
    MutexLock lock(list.mu);
    if (list.free.size() < HolderFreeList::kKept) {
      list.free.push_back(p);
      return;
    }
  }
  ::operator delete(p);
}

void release_tracked(void* /*data*/, void* hint) { SendTracker::release(hint); }

}  // namespace

Status ZmqTransport::start(const std::vector<ResolvedEndpoint>& resolved) {
  const Endpoint& own = endpoints_[rank_];
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
  if (options_.shared_memory) {
    // Same machine: the same resolved address ("tcp://127.0.0.1" of
    // "tcp://127.0.0.1:9990"). Inboxes are named after session ids, which
    // peers learn from set_peer_session.
    auto host = [](const std::string& url) { return url.substr(0, url.rfind(':')); };
    std::vector<bool> local(endpoints_.size(), false);
    bool any = false;
    std::string locals;
    for (size_t r = 0; r < endpoints_.size(); ++r) {
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

Status ZmqTransport::send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body,
                          SendTracker* tracker) {
  if (to < 0 || to >= world() || to == rank_) {
    return invalid_argument("rank {}: send to rank {}: not a peer (world {})", rank_, to, world());
  }
  if (closed_.load(std::memory_order_acquire)) {
    return Status(Code::kUnavailable, fmt::format("rank {}: send to rank {} {}: transport closed", rank_, to,
                                                  describe_tag(tag)));
  }
  Peer& peer = *peers_[to];
  if (peer.lost.load(std::memory_order_acquire)) {
    return Status(Code::kUnavailable, fmt::format("rank {}: send to {} {}: connection lost", rank_, where(to),
                                                  describe_tag(tag)));
  }
  if (lanes_ && lanes_->is_local(to)) {
    bool use_tcp = false;
    Status sent = lanes_->send(to, tag, header, body, &use_tcp);  // copied: nothing to track
    if (!use_tcp) return sent;
  }
  return send_tcp(to, tag, header, body, tracker);
}

Status ZmqTransport::send_tcp(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body,
                              SendTracker* tracker) {
  Peer& peer = *peers_[to];
  const bool inline_body = body.size() <= options_.inline_body_bytes;
  const bool sealed = options_.key != nullptr;
  const size_t first_bytes = header.size() + (inline_body ? body.size() : 0);
  // The clear parts of the message. Sealed, they are encrypted into the
  // frames under the link's lock (in counter order) instead of copied.
  zmq::message_t first(meta_bytes_ + first_bytes);
  auto* bytes = static_cast<std::byte*>(first.data());
  FrameMeta meta{sealed ? kSealedMagic : kMagic, static_cast<uint32_t>(rank_), tag};
  std::memcpy(bytes, &meta, sizeof meta);
  zmq::message_t second;
  if (!sealed) {
    if (!header.empty()) std::memcpy(bytes + sizeof meta, header.data(), header.size());
    if (inline_body && !body.empty()) std::memcpy(bytes + sizeof meta + header.size(), body.data(), body.size());
  }
  if (!inline_body) {
    if (sealed) {
      second.rebuild(body.size());  // the body is sealed into it: nothing of the caller's is kept
    } else if (tracker != nullptr) {
      // Constant message (no free function) unless a tracker wants to know
      // when ZeroMQ is done with the bytes.
      second.rebuild(const_cast<std::byte*>(body.data()), body.size(), &release_tracked, tracker->acquire());
    } else {
      second.rebuild(const_cast<std::byte*>(body.data()), body.size(), nullptr, nullptr);
    }
  }
  // Queued at once while the socket has a connection to queue on (up, or
  // dialling). It has none only between a failed handshake and the receive
  // thread's next dial (redial()): then the send waits, the socket unlocked,
  // for at most the heartbeat timeout.
  const auto give_up = Clock::now() + options_.heartbeat_timeout;
  for (;;) {
    {
      MutexLock lock(peer.mu);
      if (!peer.socket) {
        return Status(Code::kUnavailable, fmt::format("rank {}: send to rank {} {}: transport closed", rank_, to,
                                                      describe_tag(tag)));
      }
      if (sealed) {
        // Sealed on each try: a message that could not be queued leaves a
        // gap in the counters, never a later one overtaken by an earlier.
        if (!peer.sealer)
          return Status(Code::kUnavailable,
                        fmt::format("rank {}: send to {} {}: no session with it yet (its session id was not given)",
                                    rank_, where(to), describe_tag(tag)));
        // Header then body, as one stream: the body right after the header
        // in the first frame, or in the second.
        SealedMeta sealed_meta{};
        sealed_meta.meta = meta;
        sealed_meta.counter = peer.sealer->next_counter();
        auto* out = static_cast<std::byte*>(first.data());
        std::memcpy(out, &sealed_meta, sizeof sealed_meta);
        std::byte* body_out =
            inline_body ? out + sizeof(SealedMeta) + header.size() : static_cast<std::byte*>(second.data());
        uint8_t mac[kSealTagBytes];
        if (!peer.sealer->seal(sealed_meta.counter, std::span<const std::byte>(out, kSealedClearBytes), header,
                               out + sizeof(SealedMeta), body, body_out, mac))
          return Status(Code::kInternal, fmt::format("rank {}: send to {} {}: sealing failed", rank_, where(to),
                                                     describe_tag(tag)));
        std::memcpy(out + offsetof(SealedMeta, tag), mac, sizeof mac);
      }
      try {
        // Once the first part is queued, the second follows it on the same
        // connection (no high-water mark: it cannot wait).
        if (peer.socket.send(first, inline_body ? zmq::send_flags::dontwait
                                                : zmq::send_flags::dontwait | zmq::send_flags::sndmore)) {
          if (!inline_body) peer.socket.send(second, zmq::send_flags::none);
          return Status::ok_status();
        }
      } catch (const zmq::error_t& e) {
        return Status(Code::kUnavailable,
                      fmt::format("rank {}: send to {} {}: {}", rank_, where(to), describe_tag(tag), e.what()));
      }
    }
    if (closed_.load(std::memory_order_acquire) || peer.lost.load(std::memory_order_acquire) ||
        Clock::now() > give_up)
      return Status(Code::kUnavailable, fmt::format("rank {}: send to {} {}: no connection to it for {} ms", rank_,
                                                    where(to), describe_tag(tag),
                                                    options_.heartbeat_timeout.count()));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status ZmqTransport::recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) {
  if (from < 0 || from >= world() || from == rank_) {
    return invalid_argument("rank {}: recv from rank {}: not a peer (world {})", rank_, from, world());
  }
  if (!lanes_ || !lanes_->is_local(from)) return mailbox_.pop(from, tag, deadline, out);
  // A local peer's ring is polled here first: no wake-up when it comes soon.
  lanes_->poll(from, [&] { return mailbox_.has(from, tag); });
  lanes_->begin_block(from);
  Status status = mailbox_.pop(from, tag, deadline, out);
  lanes_->end_block(from);
  return status;
}

void ZmqTransport::receive_loop() {
  std::vector<zmq::pollitem_t> items;
  items.push_back({pull_.handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({wake_recv_.handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({listener_->handle(), 0, ZMQ_POLLIN, 0});
  std::vector<int> item_peer = {-1, -1, -1};
  for (int peer = 0; peer < world(); ++peer) {
    if (peer == rank_) continue;
    items.push_back({peers_[peer]->monitor.handle(), 0, ZMQ_POLLIN, 0});
    item_peer.push_back(peer);
  }
  while (!closed_.load(std::memory_order_acquire)) {
    std::chrono::milliseconds timeout(1000);
    for (const auto& peer : peers_) {
      if (peer->loss_pending || peer->redial_at != Clock::time_point{}) timeout = std::chrono::milliseconds(20);
    }
    try {
      zmq::poll(items.data(), items.size(), timeout);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      spdlog::error("rank {}: data-plane poll failed: {}", rank_, e.what());
      break;
    }
    if (closed_.load(std::memory_order_acquire)) break;
    if (items[0].revents & ZMQ_POLLIN) drain_data();
    if (items[2].revents & ZMQ_POLLIN) (void)listener_->poll();
    for (size_t i = 3; i < items.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) drain_monitor(item_peer[i]);
    }
    redial();
    report_losses();
  }
}

void ZmqTransport::drain_data() {
  // A bounded batch, so monitor events and close() are not starved.
  for (int i = 0; i < 256 && !closed_.load(std::memory_order_acquire); ++i) {
    zmq::message_t first;
    if (!pull_.recv(first, zmq::recv_flags::dontwait)) return;
    zmq::message_t second;
    bool has_second = first.more();
    bool malformed = false;
    if (has_second) {
      (void)pull_.recv(second, zmq::recv_flags::none);  // parts of a message arrive together
      while (second.more()) {
        zmq::message_t extra;
        (void)pull_.recv(extra, zmq::recv_flags::none);
        malformed = true;
        if (!extra.more()) break;
      }
    }
    FrameMeta meta{};
    if (first.size() >= sizeof meta) std::memcpy(&meta, first.data(), sizeof meta);
    const size_t limit = max_message_bytes_.load(std::memory_order_acquire);
    if (limit != 0 && first.size() + (has_second ? second.size() : 0) > limit + meta_bytes_) malformed = true;
    // Sealed, a message counts as its sender's only once it opens: what a
    // stranger writes in the sender field is never held against that rank.
    if (malformed || first.size() < meta_bytes_ || meta.magic != (options_.key ? kSealedMagic : kMagic) ||
        meta.from >= static_cast<uint32_t>(world()) || static_cast<int>(meta.from) == rank_ ||
        (options_.key && !open_sealed(static_cast<int>(meta.from), first, has_second ? &second : nullptr))) {
      // Counted; logged at most every 10 s, so a flood costs no log line each.
      int64_t total = malformed_.fetch_add(1, std::memory_order_relaxed) + 1;
      auto now = Clock::now();
      if (now - last_malformed_log_ >= std::chrono::seconds(10)) {
        spdlog::warn("rank {}: dropped {} malformed data-plane message(s) on {}:{} (latest {} bytes{}); {} in all", rank_,
                     total - malformed_at_last_log_, endpoints_[rank_].address, endpoints_[rank_].port, first.size(),
                     options_.key ? ", not sealed for this cluster's link from the rank it names" : "", total);
        last_malformed_log_ = now;
        malformed_at_last_log_ = total;
      }
      continue;
    }
    if (peers_[meta.from]->cut_off.load(std::memory_order_acquire)) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    dispatch(first, has_second ? &second : nullptr);
  }
}

bool ZmqTransport::open_sealed(int from, zmq::message_t& first, zmq::message_t* second) {
  Peer& peer = *peers_[from];
  SealedMeta sealed;
  std::memcpy(&sealed, first.data(), sizeof sealed);
  auto* bytes = static_cast<std::byte*>(first.data());
  MutexLock lock(peer.open_mu);
  if (!peer.opener) return false;  // its session id is not known here yet
  return peer.opener->open(
      std::span<const std::byte>(bytes, kSealedClearBytes), sealed.counter,
      std::span<std::byte>(bytes + sizeof sealed, first.size() - sizeof sealed),
      second ? std::span<std::byte>(static_cast<std::byte*>(second->data()), second->size()) : std::span<std::byte>(),
      sealed.tag);
}

bool ZmqTransport::to_handler(int from, uint64_t tag, MessageView message) {
  MutexLock lock(handlers_mu_);
  auto it = handlers_.find(tag);
  if (it == handlers_.end()) return false;
  if (reinterpret_cast<uintptr_t>(message.first.data()) % 8 != 0) {
    // Aligned, so the handler can verify a FlatBuffer in place; only the
    // first part (a header, or a small message) moves: a large body stays
    // in its own frame.
    scratch_.assign(message.first.begin(), message.first.end());
    message.first = scratch_;
    handler_copied_.fetch_add(static_cast<int64_t>(scratch_.size()), std::memory_order_relaxed);
  }
  try {
    it->second(from, message);
  } catch (const std::exception& e) {
    spdlog::error("rank {}: handler for {} threw: {}", rank_, describe_tag(tag), e.what());
  }
  return true;
}

void ZmqTransport::deliver(int from, uint64_t tag, std::span<const std::byte> bytes, std::unique_ptr<BytesHolder> keep) {
  if (peers_[from]->cut_off.load(std::memory_order_acquire)) {  // as on the TCP path
    malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (to_handler(from, tag, MessageView{bytes, {}})) return;  // ring bytes are 32-byte aligned, a holder's new[]'s
  if (!keep) {
    keep = std::make_unique<BytesHolder>();
    keep->bytes.assign(bytes.begin(), bytes.end());
  }
  MessageView view{std::span<const std::byte>(keep->bytes), {}};
  to_mailbox(from, tag, Received(std::move(keep), view));
}

void ZmqTransport::to_mailbox(int from, uint64_t tag, Received message) {
  const size_t bytes = message.size();
  if (mailbox_.push(from, tag, std::move(message))) return;
  peers_[from]->cut_off.store(true, std::memory_order_release);
  mark_lost(from, fmt::format("{} sent more than {} bytes that wait unread here (this run's bound; the latest message "
                              "{} bytes, {}): cut off",
                              where(from), mailbox_.unread_limit(), bytes, describe_tag(tag)));
}

void ZmqTransport::dispatch(zmq::message_t& first, zmq::message_t* second) {
  FrameMeta meta;
  std::memcpy(&meta, first.data(), sizeof meta);
  const int from = static_cast<int>(meta.from);
  const MessageView in_place{
      std::span<const std::byte>(static_cast<const std::byte*>(first.data()) + meta_bytes_, first.size() - meta_bytes_),
      second ? std::span<const std::byte>(static_cast<const std::byte*>(second->data()), second->size())
             : std::span<const std::byte>(),
      options_.key != nullptr};
  if (to_handler(from, meta.tag, in_place)) return;
  // Views are taken after the frames moved into the holder: a very small
  // frame keeps its bytes inside the message object itself.
  auto holder = std::make_unique<ZmqHolder>();
  holder->first = std::move(first);
  if (second != nullptr) holder->second = std::move(*second);
  MessageView view;
  view.sealed = options_.key != nullptr;
  view.first = std::span<const std::byte>(static_cast<const std::byte*>(holder->first.data()) + meta_bytes_,
                                          holder->first.size() - meta_bytes_);
  if (second != nullptr) {
    view.second = std::span<const std::byte>(static_cast<const std::byte*>(holder->second.data()),
                                             holder->second.size());
  }
  to_mailbox(from, meta.tag, Received(std::move(holder), view));
}

void ZmqTransport::close() {
  MutexLock lock(close_mu_);
  closed_.store(true, std::memory_order_release);
  mailbox_.close("transport closed");
  if (torn_down_) return;
  if (receiver_.joinable() && receiver_.get_id() == std::this_thread::get_id()) {
    return;  // called from a handler: the destructor finishes the teardown
  }
  if (lanes_) {
    lanes_->flush(Clock::now() + options_.close_linger);  // messages queued for a peer's inbox
    lanes_->close();
  }
  if (wake_send_) {
    try {
      zmq::message_t wake;
      (void)wake_send_.send(wake, zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // The poll timeout wakes the thread anyway.
    }
  }
  if (receiver_.joinable()) receiver_.join();
  // Nothing guards the data port once the receive thread is gone: it stops
  // listening now (the connections it holds stay up until the PULL socket
  // closes, below), so no new connection waits in it while what this rank
  // sent leaves.
  if (pull_) {
    try {
      pull_.unbind(pull_.get(zmq::sockopt::last_endpoint));
    } catch (const zmq::error_t&) {
      // Never bound (start failed), or already gone.
    }
  }
  const int linger = static_cast<int>(std::clamp<int64_t>(options_.close_linger.count(), 0, INT32_MAX));
  for (auto& peer : peers_) {
    MutexLock peer_lock(peer->mu);
    peer->fd.store(-1, std::memory_order_release);
    if (peer->socket) {
      zmq_socket_monitor(peer->socket.handle(), nullptr, 0);
      // What is still queued for the peer leaves before the context ends.
      peer->socket.set(zmq::sockopt::linger, linger);
    }
    peer->socket.close();
    peer->monitor.close();
  }
  // Returns once every queued message has left, or close_linger has passed.
  // Only then does the receiving side close: a peer reads the end of its
  // connection into this rank's PULL socket as this rank's loss, and what
  // this rank sent it (still being dialled, queued or on the wire) must
  // have reached it first.
  push_context_.close();
  if (pull_) zmq_socket_monitor(pull_.handle(), nullptr, 0);
  pull_.close();
  listener_.reset();
  wake_recv_.close();
  wake_send_.close();
  zap_.reset();  // its socket is of context_
  // After it no body is read.
  context_.close();
  torn_down_ = true;
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
