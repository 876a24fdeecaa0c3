// Mailbox: the received messages of one transport that no handler took,
// queued per (sender, tag) until a recv takes them. Internal to comm/.
//
// Thread-safe: the receive thread pushes, any thread pops. Each (sender,
// tag) queue has its own condition variable, so a message wakes only the
// threads waiting for it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "comm/transport.h"

namespace rill::comm {

class Mailbox {
 public:
  Mailbox(int rank, int world);

  // Queues the message, or drops it (and counts it) when its tag is outside
  // the accepted window: a stale job's message, or a peer's garbage. False
  // when it would take the bytes waiting from `from` past the bound
  // (limit_unread_bytes): it is dropped, and the caller cuts the peer off.
  bool push(int from, uint64_t tag, Received message);
  // At most this many bytes (kMessageCost more per message, for what a
  // queued message costs beyond its bytes) wait unread from one peer; 0 (the
  // default): no bound.
  void limit_unread_bytes(int64_t bytes);
  static constexpr int64_t kMessageCost = 256;
  int64_t unread_limit() const;
  // Accepts tags in [lo, hi) only from now on, and frees queued messages
  // outside it.
  void accept_tags(uint64_t lo, uint64_t hi);
  int64_t dropped() const;
  // Pops waiting for a tag in [lo, hi), now or later, fail with kAborted.
  void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason);
  // Whether a message from `from` with `tag` is queued.
  bool has(int from, uint64_t tag) const;
  // Waits for the oldest message from `from` with `tag`. Messages queued
  // before a loss or close are still handed out.
  Status pop(int from, uint64_t tag, Clock::time_point deadline, Received* out);
  // Later pops from `from` that find no message fail with kUnavailable.
  void mark_lost(int from, const std::string& reason);
  // `from` is back (a restarted process): pops wait for it again, and what
  // its lost predecessor sent is freed.
  void revive(int from);
  // Every later pop that finds no message fails with kUnavailable.
  void close(const std::string& reason);

 private:
  struct Key {
    int from;
    uint64_t tag;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const { return std::hash<uint64_t>()(key.tag * 1000003u + key.from); }
  };
  // A FIFO in a ring that grows by doubling and never shrinks, so a queue in
  // steady use allocates nothing (a deque allocates a block every few
  // messages).
  class Ring {
   public:
    bool empty() const { return size_ == 0; }
    size_t size() const { return size_; }
    Received& front() { return slots_[head_]; }
    void pop_front() {
      slots_[head_].reset();
      head_ = (head_ + 1) % slots_.size();
      --size_;
    }
    void push_back(Received message);

   private:
    std::vector<Received> slots_;
    size_t head_ = 0, size_ = 0;
  };
  struct Queue {
    Ring messages;
    CondVar ready;
    int waiters = 0;
  };
  // Idle queues beyond this many are freed; below it they are kept so that a
  // tag used again and again does not allocate a queue each time.
  static constexpr size_t kKeptQueues = 256;

  int rank_;
  mutable Mutex mu_;
  std::unordered_map<Key, std::unique_ptr<Queue>, KeyHash> queues_ GUARDED_BY(mu_);
  std::vector<std::string> lost_ GUARDED_BY(mu_);  // per rank
  std::string closed_ GUARDED_BY(mu_);
  bool is_closed_ GUARDED_BY(mu_) = false;
  uint64_t accept_lo_ GUARDED_BY(mu_) = 0;
  uint64_t accept_hi_ GUARDED_BY(mu_) = UINT64_MAX;
  struct Cancelled {
    uint64_t lo, hi;
    std::string reason;
  };
  static constexpr size_t kKeptCancelled = 16;  // runs are numbered upwards: old ranges are never asked for
  std::vector<Cancelled> cancelled_ GUARDED_BY(mu_);  // newest last
  int64_t dropped_ GUARDED_BY(mu_) = 0;
  int64_t unread_limit_ GUARDED_BY(mu_) = 0;
  std::vector<int64_t> unread_ GUARDED_BY(mu_);  // bytes (and kMessageCost each) queued per rank
  Clock::time_point last_drop_log_ GUARDED_BY(mu_);
  int64_t dropped_at_last_log_ GUARDED_BY(mu_) = 0;

  // Drops a queue's messages, counting them.
  void drop_all(int from, Ring& messages) REQUIRES(mu_);
};

}  // namespace rill::comm
