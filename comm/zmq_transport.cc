// The ZeroMQ transport: sending, receiving and closing (what it is, and the
// class: zmq_transport_impl.h; its set-up: zmq_transport_start.cc; each
// peer's connection: zmq_transport_peers.cc).
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
#include "comm/zmq_frame.h"
#include "comm/zmq_transport_impl.h"

namespace rill::comm::zmq_internal {
namespace {

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
    if (items[1].revents & ZMQ_POLLIN) {
      zmq::message_t wake;  // set_peer_endpoint's (close()'s ends the loop)
      while (wake_recv_.recv(wake, zmq::recv_flags::dontwait)) {
      }
    }
    admit_moved();  // before the connections it may admit are looked at
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
                     total - malformed_at_last_log_, own_.address, own_.port, first.size(),
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
