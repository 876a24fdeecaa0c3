#include "runtime/cluster/inproc_control_channel.h"

#include <fmt/format.h>

namespace rill {

class InprocControlChannel final : public ControlChannel {
 public:
  InprocControlChannel(std::shared_ptr<InprocControlHub> hub, int rank)
      : hub_(std::move(hub)), rank_(rank), identity_(fmt::format("node-{}", rank)) {}

  bool receive(std::chrono::milliseconds timeout, Incoming* out) override {
    InprocControlHub::Message m;
    bool from_master = false;
    // A non-master's link up to the master is identity node-R at port 0.
    if (!hub_->pop(rank_, rank_ == 0 ? std::string() : identity_, 0, timeout, &m, &from_master)) return false;
    out->from_master = from_master;
    out->identity = from_master ? std::string() : std::move(m.identity);
    out->bytes = std::move(m.bytes);
    return true;
  }

  Sent send_to_master(const std::string& bytes) override {
    MutexLock lock(hub_->mu_);
    return hub_->push(hub_->ports_[0], {identity_, bytes});
  }

  Sent send_to(const std::string& identity, const std::string& bytes) override {
    MutexLock lock(hub_->mu_);
    auto it = hub_->links_.find({rank_, identity});
    if (it == hub_->links_.end()) return Sent::kUnreachable;
    return hub_->push(it->second, {identity_, bytes});
  }

  std::string master_failure() override { return {}; }
  void wake() override { hub_->wake(rank_); }

 private:
  std::shared_ptr<InprocControlHub> hub_;
  const int rank_;
  const std::string identity_;
};

std::unique_ptr<ControlChannel> InprocControlHub::channel(int rank) {
  {
    // A fresh connection: what waited for an agent of this rank before (one
    // that has gone) is not for this one.
    MutexLock lock(mu_);
    const bool again = !opened_.insert(rank).second;
    Inbox& port = ports_[rank];
    if (again) port.clear();
    if (rank != 0) {
      Inbox& link = links_[{0, fmt::format("node-{}", rank)}];  // the master reaches it from now on
      if (again) link.clear();
    }
  }
  return std::make_unique<InprocControlChannel>(shared_from_this(), rank);
}

InprocControlHub::Client InprocControlHub::client(int port, const std::string& identity) {
  MutexLock lock(mu_);
  links_[{port, identity}];
  return Client(shared_from_this(), port, identity);
}

ControlChannel::Sent InprocControlHub::push(Inbox& inbox, Message message) {
  if (capacity_ > 0 && inbox.size() >= capacity_) return ControlChannel::Sent::kFull;
  inbox.push_back(std::move(message));
  arrived_.notify_all();
  return ControlChannel::Sent::kSent;
}

void InprocControlHub::wake(int rank) {
  MutexLock lock(mu_);
  woken_.insert(rank);
  arrived_.notify_all();
}

bool InprocControlHub::pop(int rank, const std::string& identity, int port, std::chrono::milliseconds timeout,
                           Message* out, bool* from_identity) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  // Turns between the two inboxes when both have messages, as ZeroMQ's
  // channel takes them.
  const bool link_first = (++pops_ % 2) == 0;
  for (;;) {
    Inbox* own = rank >= 0 ? &ports_[rank] : nullptr;
    Inbox* link = identity.empty() ? nullptr : &links_[{port, identity}];
    const bool own_ready = own && !own->empty(), link_ready = link && !link->empty();
    if (own_ready && !(link_ready && link_first)) {
      *out = std::move(own->front());
      own->pop_front();
      *from_identity = false;
      return true;
    }
    if (link_ready) {
      *out = std::move(link->front());
      link->pop_front();
      *from_identity = true;
      return true;
    }
    if (rank >= 0 && woken_.erase(rank) > 0) return false;
    if (!arrived_.wait_until(mu_, deadline)) return false;
  }
}

ControlChannel::Sent InprocControlHub::Client::send(const std::string& bytes) {
  MutexLock lock(hub_->mu_);
  return hub_->push(hub_->ports_[port_], {identity_, bytes});
}

bool InprocControlHub::Client::receive(std::chrono::milliseconds timeout, std::string* bytes) {
  InprocControlHub::Message m;
  bool from_identity = false;
  if (!hub_->pop(-1, identity_, port_, timeout, &m, &from_identity)) return false;
  *bytes = std::move(m.bytes);
  return true;
}

}  // namespace rill
