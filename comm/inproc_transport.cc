// The in-process transport: ranks of one process linked by a shared hub.
// send copies the message and puts it straight into the receiver's mailbox,
// or, for a tag with a handler, on the receiver's handler queue, which its
// own receive thread serves (as the ZeroMQ transport's receive thread does).
#include <cstring>
#include <deque>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "base/mutex.h"
#include "comm/mailbox.h"
#include "comm/transport.h"

namespace rill::comm {
namespace {

struct VectorHolder final : Received::Holder {
  std::vector<std::byte> bytes;
};

class InprocTransport;

struct Hub {
  Mutex mu;
  std::vector<InprocTransport*> ranks GUARDED_BY(mu);  // null once closed
};

class InprocTransport final : public Transport {
 public:
  InprocTransport(std::shared_ptr<Hub> hub, int rank, int world)
      : hub_(std::move(hub)), rank_(rank), world_(world), mailbox_(rank, world) {
    receiver_ = std::thread([this] { handler_loop(); });
  }
  ~InprocTransport() override { close(); }

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  Status send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body,
              SendTracker* /*tracker: bodies are copied here*/) override {
    if (to < 0 || to >= world_ || to == rank_) {
      return invalid_argument("rank {}: send to rank {}: not a peer (world {})", rank_, to, world_);
    }
    auto holder = std::make_unique<VectorHolder>();
    holder->bytes.resize(header.size() + body.size());
    if (!header.empty()) std::memcpy(holder->bytes.data(), header.data(), header.size());
    if (!body.empty()) std::memcpy(holder->bytes.data() + header.size(), body.data(), body.size());
    MutexLock lock(hub_->mu);
    if (hub_->ranks[rank_] != this) {  // closed (its rank may have been reopened since)
      return Status(Code::kUnavailable, fmt::format("rank {}: send to rank {} {}: transport closed", rank_, to,
                                                    describe_tag(tag)));
    }
    InprocTransport* peer = hub_->ranks[to];
    if (peer == nullptr) {
      return Status(Code::kUnavailable, fmt::format("rank {}: send to rank {} {}: rank {} is closed", rank_, to,
                                                    describe_tag(tag), to));
    }
    peer->deliver(rank_, tag, std::move(holder));
    return Status::ok_status();
  }

  Status recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) override {
    if (from < 0 || from >= world_ || from == rank_) {
      return invalid_argument("rank {}: recv from rank {}: not a peer (world {})", rank_, from, world_);
    }
    return mailbox_.pop(from, tag, deadline, out);
  }

  void accept_tags(uint64_t lo, uint64_t hi) override { mailbox_.accept_tags(lo, hi); }
  void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) override {
    mailbox_.cancel_tags(lo, hi, reason);
  }
  int64_t received_dropped() const override { return mailbox_.dropped(); }
  bool peer_lost(int rank) const override {
    MutexLock lock(hub_->mu);
    return rank >= 0 && rank < world_ && rank != rank_ && hub_->ranks[rank] == nullptr;
  }

  // A rank that joined again is back: what it sent before and no recv took
  // is dropped.
  void revive(int rank) override {
    if (rank >= 0 && rank < world_ && rank != rank_) mailbox_.revive(rank);
  }

  // Waits for a running handler call, so that after it returns the old
  // handler is not called any more. An empty handler removes the tag's.
  void set_handler(uint64_t tag, Handler handler) override {
    MutexLock call_lock(call_mu_);
    MutexLock lock(mu_);
    if (handler) {
      handlers_[tag] = std::move(handler);
    } else {
      handlers_.erase(tag);
    }
  }

  void close() override {
    {
      MutexLock lock(hub_->mu);
      if (hub_->ranks[rank_] == this) {  // not a rank reopened since
        hub_->ranks[rank_] = nullptr;
        for (InprocTransport* peer : hub_->ranks) {
          if (peer != nullptr) peer->mailbox_.mark_lost(rank_, fmt::format("rank {} closed its transport", rank_));
        }
      }
    }
    mailbox_.close("transport closed");
    {
      MutexLock lock(mu_);
      stopping_ = true;
      pending_cv_.notify_all();
    }
    if (receiver_.joinable() && receiver_.get_id() != std::this_thread::get_id()) receiver_.join();
  }

 private:
  struct Pending {
    int from = 0;
    uint64_t tag = 0;
    std::unique_ptr<VectorHolder> holder;
  };

  // Called with the hub lock held, so this transport is not closing under it.
  void deliver(int from, uint64_t tag, std::unique_ptr<VectorHolder> holder) {
    {
      MutexLock lock(mu_);
      if (handlers_.count(tag) != 0) {
        pending_.push_back(Pending{from, tag, std::move(holder)});
        pending_cv_.notify_one();
        return;
      }
    }
    MessageView view{std::span<const std::byte>(holder->bytes), {}};
    mailbox_.push(from, tag, Received(std::move(holder), view));
  }

  void handler_loop() {
    while (true) {
      Pending next;
      {
        MutexLock lock(mu_);
        while (!stopping_ && pending_.empty()) pending_cv_.wait(mu_);
        if (stopping_) return;
        next = std::move(pending_.front());
        pending_.pop_front();
      }
      // call_mu_ keeps the handler in place during the call; mu_ is not
      // held, so the handler may send (which takes a peer's mu_).
      MutexLock call_lock(call_mu_);
      Handler* handler = nullptr;
      {
        MutexLock lock(mu_);
        auto it = handlers_.find(next.tag);
        if (it != handlers_.end()) handler = &it->second;
      }
      if (handler == nullptr) {  // removed after the message arrived
        MessageView view{std::span<const std::byte>(next.holder->bytes), {}};
        mailbox_.push(next.from, next.tag, Received(std::move(next.holder), view));
        continue;
      }
      try {
        (*handler)(next.from, MessageView{std::span<const std::byte>(next.holder->bytes), {}});
      } catch (const std::exception& e) {
        spdlog::error("rank {}: handler for {} threw: {}", rank_, describe_tag(next.tag), e.what());
      }
    }
  }

  std::shared_ptr<Hub> hub_;
  const int rank_;
  const int world_;
  Mailbox mailbox_;
  Mutex call_mu_;  // held while a handler runs and while handlers_ changes
  Mutex mu_;
  std::unordered_map<uint64_t, Handler> handlers_ GUARDED_BY(mu_);  // written under call_mu_ too
  std::deque<Pending> pending_ GUARDED_BY(mu_);
  CondVar pending_cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread receiver_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_inproc_transports(int world) {
  auto hub = std::make_shared<Hub>();
  MutexLock lock(hub->mu);
  hub->ranks.resize(static_cast<size_t>(world));
  std::vector<std::unique_ptr<Transport>> out;
  for (int rank = 0; rank < world; ++rank) {
    auto transport = std::make_unique<InprocTransport>(hub, rank, world);
    hub->ranks[rank] = transport.get();
    out.push_back(std::move(transport));
  }
  return out;
}

}  // namespace rill::comm
