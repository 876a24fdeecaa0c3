#include "comm/faulty_transport.h"

#include <cstring>

#include <spdlog/spdlog.h>

namespace rill::comm {

FaultyTransport::FaultyTransport(std::unique_ptr<Transport> inner)
    : inner_(std::move(inner)),
      held_(static_cast<size_t>(inner_->world())),
      cut_(static_cast<size_t>(inner_->world()), false) {
  delayer_ = std::thread([this] { delay_loop(); });
}

FaultyTransport::~FaultyTransport() { close(); }

void FaultyTransport::set_fault(Fault fault, DropPredicate pick) {
  MutexLock lock(mu_);
  fault_ = fault;
  pick_ = std::move(pick);
}

void FaultyTransport::set_delay(std::chrono::milliseconds delay) {
  MutexLock lock(mu_);
  delay_ = delay;
}

void FaultyTransport::cut(int peer) {
  MutexLock lock(mu_);
  if (peer >= 0 && peer < static_cast<int>(cut_.size())) cut_[peer] = true;
}

bool FaultyTransport::is_cut(int peer) const {
  MutexLock lock(mu_);
  return peer >= 0 && peer < static_cast<int>(cut_.size()) && cut_[peer];
}

Status FaultyTransport::send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body,
                             SendTracker* tracker) {
  if (to < 0 || to >= world() || to == rank()) return inner_->send(to, tag, header, body, tracker);  // its error
  UniqueLock lock(mu_);
  if (cut_[to]) {
    return Status(Code::kUnavailable, fmt::format("rank {}: send to rank {} {}: link cut", rank(), to,
                                                  describe_tag(tag)));
  }
  if (pick_ && pick_(to, tag, header, body)) {
    std::vector<std::byte> copy(header.size() + body.size());
    if (!header.empty()) std::memcpy(copy.data(), header.data(), header.size());
    if (!body.empty()) std::memcpy(copy.data() + header.size(), body.data(), body.size());
    switch (fault_) {
      case Fault::kDrop:
        dropped_.fetch_add(1);
        return Status::ok_status();
      case Fault::kSwap:
        held_[to] = {tag, std::move(copy)};  // goes after the next send to `to`
        return Status::ok_status();
      case Fault::kDuplicate: {
        lock.unlock();
        RILL_RETURN_IF_ERROR(inner_->send(to, tag, copy));
        return inner_->send(to, tag, copy);
      }
      case Fault::kStuck: {
        if (tracker != nullptr && !body.empty())
          stuck_.push_back(Stuck{body, std::vector<std::byte>(body.begin(), body.end()), tracker->acquire()});
        dropped_.fetch_add(1);
        return Status::ok_status();
      }
      case Fault::kCorrupt: {
        if (!copy.empty()) copy[body.empty() ? copy.size() - 1 : header.size() + body.size() / 2] ^= std::byte{0x40};
        lock.unlock();
        return inner_->send(to, tag, copy);
      }
    }
  }
  if (!held_[to].second.empty()) {
    auto [held_tag, swapped] = std::move(held_[to]);
    held_[to] = {};
    lock.unlock();
    RILL_RETURN_IF_ERROR(inner_->send(to, tag, header, body, tracker));
    return inner_->send(to, held_tag, swapped);
  }
  if (delay_.count() > 0 || !delayed_.empty()) {
    // Copied, so the caller's buffers are free at once; queued behind any
    // earlier delayed message so that order holds.
    Delayed d{Clock::now() + delay_, to, tag, {}};
    d.bytes.resize(header.size() + body.size());
    if (!header.empty()) std::memcpy(d.bytes.data(), header.data(), header.size());
    if (!body.empty()) std::memcpy(d.bytes.data() + header.size(), body.data(), body.size());
    delayed_.push_back(std::move(d));
    delayed_cv_.notify_one();
    return Status::ok_status();
  }
  lock.unlock();
  return inner_->send(to, tag, header, body, tracker);
}

Status FaultyTransport::recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) {
  if (is_cut(from)) {
    return Status(Code::kUnavailable, fmt::format("rank {}: recv from rank {} {}: link cut", rank(), from,
                                                  describe_tag(tag)));
  }
  RILL_RETURN_IF_ERROR(inner_->recv_message(from, tag, deadline, out));
  if (!is_cut(from)) return Status::ok_status();
  out->reset();  // the link was cut while this recv waited: discarded
  return Status(Code::kUnavailable, fmt::format("rank {}: recv from rank {} {}: link cut", rank(), from,
                                                describe_tag(tag)));
}

void FaultyTransport::set_handler(uint64_t tag, Handler handler) {
  if (!handler) return inner_->set_handler(tag, nullptr);
  inner_->set_handler(tag, [this, handler = std::move(handler)](int from, const MessageView& message) {
    if (is_cut(from)) return;
    handler(from, message);
  });
}

bool FaultyTransport::stuck_bodies_intact() const {
  MutexLock lock(mu_);
  for (const Stuck& s : stuck_)
    if (std::memcmp(s.body.data(), s.sent.data(), s.sent.size()) != 0) return false;
  return true;
}

int64_t FaultyTransport::stuck() const {
  MutexLock lock(mu_);
  return static_cast<int64_t>(stuck_.size());
}

void FaultyTransport::close() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    delayed_cv_.notify_all();
    for (Stuck& s : stuck_) SendTracker::release(s.token);
    stuck_.clear();
  }
  if (delayer_.joinable() && delayer_.get_id() != std::this_thread::get_id()) delayer_.join();
  inner_->close();
}

void FaultyTransport::delay_loop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    if (delayed_.empty()) {
      delayed_cv_.wait(mu_);
      continue;
    }
    if (Clock::now() < delayed_.front().due) {
      delayed_cv_.wait_until(mu_, delayed_.front().due);
      continue;
    }
    Delayed d = std::move(delayed_.front());
    delayed_.pop_front();
    bool cut = cut_[d.to];
    mu_.unlock();  // sent without the lock
    if (!cut) {
      // The bytes go as the header, which every transport copies.
      Status status = inner_->send(d.to, d.tag, d.bytes);
      if (!status.ok()) spdlog::warn("delayed send failed: {}", status.to_string());
    }
    mu_.lock();
  }
}

}  // namespace rill::comm
