#include "comm/mailbox.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

namespace rill::comm {

Mailbox::Mailbox(int rank, int world)
    : rank_(rank), lost_(static_cast<size_t>(world)), unread_(static_cast<size_t>(world), 0) {}

void Mailbox::Ring::push_back(Received message) {
  if (size_ == slots_.size()) {
    std::vector<Received> grown(std::max<size_t>(8, 2 * slots_.size()));
    for (size_t i = 0; i < size_; ++i) grown[i] = std::move(slots_[(head_ + i) % slots_.size()]);
    slots_ = std::move(grown);
    head_ = 0;
  }
  slots_[(head_ + size_) % slots_.size()] = std::move(message);
  ++size_;
}

bool Mailbox::push(int from, uint64_t tag, Received message) {
  MutexLock lock(mu_);
  if (tag < accept_lo_ || tag >= accept_hi_) {
    // Logged at most every 10 s, so a flood costs a counter, not a log line each.
    ++dropped_;
    auto now = Clock::now();
    if (now - last_drop_log_ >= std::chrono::seconds(10)) {
      spdlog::warn("rank {}: dropped {} data-plane message(s) with tags outside [{:#x}, {:#x}) (latest from rank {}, "
                   "{}); {} in all", rank_, dropped_ - dropped_at_last_log_, accept_lo_, accept_hi_, from,
                   describe_tag(tag), dropped_);
      last_drop_log_ = now;
      dropped_at_last_log_ = dropped_;
    }
    return true;
  }
  const int64_t cost = static_cast<int64_t>(message.size()) + kMessageCost;
  if (unread_limit_ > 0 && unread_[from] + cost > unread_limit_) {
    ++dropped_;
    return false;
  }
  unread_[from] += cost;
  auto& queue = queues_[Key{from, tag}];
  if (!queue) queue = std::make_unique<Queue>();
  queue->messages.push_back(std::move(message));
  if (queue->waiters > 0) queue->ready.notify_one();
  return true;
}

void Mailbox::limit_unread_bytes(int64_t bytes) {
  MutexLock lock(mu_);
  unread_limit_ = bytes;
}

int64_t Mailbox::unread_limit() const {
  MutexLock lock(mu_);
  return unread_limit_;
}

void Mailbox::drop_all(int from, Ring& messages) {
  dropped_ += static_cast<int64_t>(messages.size());
  while (!messages.empty()) {
    unread_[from] -= static_cast<int64_t>(messages.front().size()) + kMessageCost;
    messages.pop_front();
  }
}

void Mailbox::accept_tags(uint64_t lo, uint64_t hi) {
  MutexLock lock(mu_);
  accept_lo_ = lo;
  accept_hi_ = hi;
  for (auto it = queues_.begin(); it != queues_.end();) {
    bool outside = it->first.tag < lo || it->first.tag >= hi;
    if (outside && it->second->waiters == 0) {
      drop_all(it->first.from, it->second->messages);
      it = queues_.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t Mailbox::dropped() const {
  MutexLock lock(mu_);
  return dropped_;
}

bool Mailbox::has(int from, uint64_t tag) const {
  MutexLock lock(mu_);
  auto it = queues_.find(Key{from, tag});
  return it != queues_.end() && !it->second->messages.empty();
}

Status Mailbox::pop(int from, uint64_t tag, Clock::time_point deadline, Received* out) {
  MutexLock lock(mu_);
  auto& slot = queues_[Key{from, tag}];
  if (!slot) slot = std::make_unique<Queue>();
  Queue* queue = slot.get();
  while (queue->messages.empty()) {
    for (const Cancelled& c : cancelled_)
      if (tag >= c.lo && tag < c.hi)
        return Status(Code::kAborted,
                      fmt::format("rank {}: recv from rank {} {}: {}", rank_, from, describe_tag(tag), c.reason));
    if (is_closed_) {
      return Status(Code::kUnavailable, fmt::format("rank {}: recv from rank {} {}: {}", rank_, from,
                                                    describe_tag(tag), closed_));
    }
    if (!lost_[from].empty()) {
      return Status(Code::kUnavailable, fmt::format("rank {}: recv from rank {} {}: {}", rank_, from,
                                                    describe_tag(tag), lost_[from]));
    }
    auto now = Clock::now();
    if (now >= deadline) {
      return Status(Code::kDeadlineExceeded,
                    fmt::format("rank {}: no message from rank {} with {} before the deadline", rank_, from,
                                describe_tag(tag)));
    }
    ++queue->waiters;
    queue->ready.wait_until(mu_, deadline);
    --queue->waiters;
  }
  *out = std::move(queue->messages.front());
  queue->messages.pop_front();
  unread_[from] -= static_cast<int64_t>(out->size()) + kMessageCost;
  if (queue->messages.empty() && queue->waiters == 0 && queues_.size() > kKeptQueues) {
    queues_.erase(Key{from, tag});
  }
  return Status::ok_status();
}

void Mailbox::cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) {
  MutexLock lock(mu_);
  if (cancelled_.size() == kKeptCancelled) cancelled_.erase(cancelled_.begin());
  cancelled_.push_back(Cancelled{lo, hi, reason});
  for (auto& [key, queue] : queues_)
    if (key.tag >= lo && key.tag < hi) queue->ready.notify_all();
}

void Mailbox::mark_lost(int from, const std::string& reason) {
  MutexLock lock(mu_);
  if (!lost_[from].empty()) return;
  lost_[from] = reason;
  for (auto& [key, queue] : queues_) {
    if (key.from == from) queue->ready.notify_all();
  }
}

void Mailbox::revive(int from) {
  MutexLock lock(mu_);
  lost_[from].clear();
  for (auto it = queues_.begin(); it != queues_.end();) {
    if (it->first.from != from) {
      ++it;
      continue;
    }
    drop_all(from, it->second->messages);
    if (it->second->waiters == 0) {
      it = queues_.erase(it);
      continue;
    }
    ++it;
  }
}

void Mailbox::close(const std::string& reason) {
  MutexLock lock(mu_);
  if (is_closed_) return;
  is_closed_ = true;
  closed_ = reason;
  for (auto& [key, queue] : queues_) queue->ready.notify_all();
}

}  // namespace rill::comm
