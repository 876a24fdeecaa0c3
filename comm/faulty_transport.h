// FaultyTransport: wraps a Transport to inject faults in tests: drop,
// duplicate, swap or corrupt the messages a predicate picks, delay every
// message, or cut the link to a peer.
// Faults act on this rank's sends and receives; wrap every rank to fault
// both directions.
//
// Threads: as Transport. The fault settings may change at any time from any
// thread; a delayed message is sent by the wrapper's own thread, in order.
#pragma once

#include <atomic>
#include <deque>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "comm/transport.h"

namespace rill::comm {

class FaultyTransport final : public Transport {
 public:
  using DropPredicate = std::function<bool(int to, uint64_t tag, std::span<const std::byte> header,
                                           std::span<const std::byte> body)>;

  explicit FaultyTransport(std::unique_ptr<Transport> inner);
  ~FaultyTransport() override;

  // What a picked send meets.
  enum class Fault {
    kDrop,       // not sent (send returns ok)
    kDuplicate,  // sent twice
    kSwap,       // held back and sent right after the next send to the same peer
    kCorrupt,    // sent with one byte flipped: the body's middle one, else the header's last
    kStuck,      // not delivered, and its body stays read by the wire (its tracker held) until
                 // close(): a message ZeroMQ keeps queued on a connection that dropped
  };
  // kStuck: whether every stuck body still holds the bytes it was sent with
  // (false: its buffer was freed or rewritten while the wire read it).
  bool stuck_bodies_intact() const;
  int64_t stuck() const;
  // Sends for which `pick` returns true meet `fault` (one fault at a time).
  void set_fault(Fault fault, DropPredicate pick);
  // set_fault(Fault::kDrop, predicate).
  void set_drop(DropPredicate predicate) { set_fault(Fault::kDrop, std::move(predicate)); }
  // Each later send reaches the wire `delay` after the call (order kept).
  void set_delay(std::chrono::milliseconds delay);
  // Cuts the link to `peer` both ways: sends to it fail with kUnavailable,
  // its messages are discarded, recv from it fails with kUnavailable.
  void cut(int peer);
  int64_t dropped() const { return dropped_.load(); }

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  Status send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body = {},
              SendTracker* tracker = nullptr) override;
  Status recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) override;
  void set_handler(uint64_t tag, Handler handler) override;
  void accept_tags(uint64_t lo, uint64_t hi) override { inner_->accept_tags(lo, hi); }
  void limit_message_bytes(size_t bytes) override { inner_->limit_message_bytes(bytes); }
  void limit_unread_bytes(size_t bytes) override { inner_->limit_unread_bytes(bytes); }
  size_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) override {
    inner_->cancel_tags(lo, hi, reason);
  }
  int64_t received_dropped() const override { return inner_->received_dropped(); }
  std::vector<std::optional<TcpLinkCounters>> link_counters() const override { return inner_->link_counters(); }
  bool peer_lost(int rank) const override { return inner_->peer_lost(rank); }
  void revive(int rank) override { inner_->revive(rank); }
  const SessionId* session() const override { return inner_->session(); }
  // seals() stays false: the faults it injects come before the sealing.
  void set_peer_session(int rank, const SessionId& session) override { inner_->set_peer_session(rank, session); }
  Status set_peer_endpoint(int rank, const Endpoint& endpoint) override {
    return inner_->set_peer_endpoint(rank, endpoint);
  }
  void close() override;

 private:
  struct Delayed {
    Clock::time_point due;
    int to;
    uint64_t tag;
    std::vector<std::byte> bytes;  // header and body, copied
  };
  bool is_cut(int peer) const;
  void delay_loop();

  std::unique_ptr<Transport> inner_;
  mutable Mutex mu_;
  Fault fault_ GUARDED_BY(mu_) = Fault::kDrop;
  DropPredicate pick_ GUARDED_BY(mu_);
  // Per peer, a swapped message (its tag; header and body, none: empty).
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> held_ GUARDED_BY(mu_);
  struct Stuck {
    std::span<const std::byte> body;  // the sender's buffer
    std::vector<std::byte> sent;      // its bytes when sent
    void* token;                      // the sender's tracker, released at close()
  };
  std::vector<Stuck> stuck_ GUARDED_BY(mu_);
  std::chrono::milliseconds delay_ GUARDED_BY(mu_){0};
  std::vector<bool> cut_ GUARDED_BY(mu_);
  std::deque<Delayed> delayed_ GUARDED_BY(mu_);
  CondVar delayed_cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<int64_t> dropped_{0};
  std::thread delayer_;
};

}  // namespace rill::comm
