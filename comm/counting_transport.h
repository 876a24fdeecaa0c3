// CountingTransport: wraps a Transport and counts the messages (and their
// bytes) this rank sends to, and receives from, each peer (handler and
// mailbox alike). The agent wraps its data plane in one, so a job's result
// can show which node talked to which: after the start, traffic between two
// nodes goes straight between them, never through the master.
//
// Threads: as Transport; counters are atomics, read and reset from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "comm/transport.h"

namespace rill::comm {

class CountingTransport : public Transport {
 public:
  explicit CountingTransport(std::unique_ptr<Transport> inner)
      : inner_(std::move(inner)),
        sent_(inner_->world()),
        received_(inner_->world()),
        received_bytes_(inner_->world()) {}

  // Messages received from each peer since the last reset (index = rank).
  std::vector<int64_t> received_from() const { return read(received_); }
  // Bytes of those messages (header and body) from each peer.
  std::vector<int64_t> received_bytes_from() const { return read(received_bytes_); }
  std::vector<int64_t> sent_to() const { return read(sent_); }
  // Messages sent to all peers (reading it allocates nothing).
  int64_t sent_total() const {
    int64_t n = 0;
    for (const auto& c : sent_) n += c.load(std::memory_order_relaxed);
    return n;
  }
  void reset() {
    for (auto& c : sent_) c.store(0);
    for (auto& c : received_) c.store(0);
    for (auto& c : received_bytes_) c.store(0);
  }

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  Status send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body = {},
              SendTracker* tracker = nullptr) override {
    Status status = inner_->send(to, tag, header, body, tracker);
    if (status.ok() && to >= 0 && to < world()) sent_[to].fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  Status recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) override {
    Status status = inner_->recv_message(from, tag, deadline, out);
    if (status.ok() && from >= 0 && from < world()) count(from, out->view().size());
    return status;
  }
  void set_handler(uint64_t tag, Handler handler) override {
    if (!handler) {
      inner_->set_handler(tag, nullptr);
      return;
    }
    inner_->set_handler(tag, [this, handler = std::move(handler)](int from, const MessageView& message) {
      if (from >= 0 && from < world()) count(from, message.size());
      handler(from, message);
    });
  }
  void accept_tags(uint64_t lo, uint64_t hi) override { inner_->accept_tags(lo, hi); }
  void limit_message_bytes(size_t bytes) override { inner_->limit_message_bytes(bytes); }
  void limit_unread_bytes(size_t bytes) override { inner_->limit_unread_bytes(bytes); }
  size_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) override {
    inner_->cancel_tags(lo, hi, reason);
  }
  int64_t received_dropped() const override { return inner_->received_dropped(); }
  int64_t handler_bytes_copied() const override { return inner_->handler_bytes_copied(); }
  std::vector<std::optional<TcpLinkCounters>> link_counters() const override { return inner_->link_counters(); }
  bool peer_lost(int rank) const override { return inner_->peer_lost(rank); }
  void revive(int rank) override { inner_->revive(rank); }
  const SessionId* session() const override { return inner_->session(); }
  bool seals(int peer) const override { return inner_->seals(peer); }
  void set_peer_session(int rank, const SessionId& session) override { inner_->set_peer_session(rank, session); }
  Status set_peer_endpoint(int rank, const Endpoint& endpoint) override {
    return inner_->set_peer_endpoint(rank, endpoint);
  }
  void close() override { inner_->close(); }

 private:
  static std::vector<int64_t> read(const std::vector<std::atomic<int64_t>>& counters) {
    std::vector<int64_t> out;
    for (const auto& c : counters) out.push_back(c.load());
    return out;
  }

  void count(int from, size_t bytes) {
    received_[from].fetch_add(1, std::memory_order_relaxed);
    received_bytes_[from].fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }

  std::unique_ptr<Transport> inner_;
  std::vector<std::atomic<int64_t>> sent_;
  std::vector<std::atomic<int64_t>> received_;
  std::vector<std::atomic<int64_t>> received_bytes_;
};

}  // namespace rill::comm
