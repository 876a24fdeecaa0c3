#include "comm/transport.h"

#include <atomic>
#include <cstring>

#include "base/mutex.h"

namespace rill::comm {

// One reference for the tracker itself plus one per body in flight, so that a
// release after the tracker was destroyed still finds live state.
struct SendTracker::State {
  Mutex mu;
  CondVar drained;
  int64_t in_flight GUARDED_BY(mu) = 0;
  std::atomic<int64_t> references{1};

  void unref() {
    if (references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

SendTracker::SendTracker() : state_(new State) {}

SendTracker::~SendTracker() { state_->unref(); }

void* SendTracker::acquire() {
  state_->references.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(state_->mu);
  ++state_->in_flight;
  return state_;
}

void SendTracker::release(void* token) {
  auto* state = static_cast<State*>(token);
  {
    MutexLock lock(state->mu);
    if (--state->in_flight == 0) state->drained.notify_all();
  }
  state->unref();
}

int64_t SendTracker::in_flight() const {
  MutexLock lock(state_->mu);
  return state_->in_flight;
}

Status SendTracker::wait(Clock::time_point deadline) const {
  MutexLock lock(state_->mu);
  while (state_->in_flight > 0)
    if (!state_->drained.wait_until(state_->mu, deadline)) break;
  if (state_->in_flight > 0) {
    return Status(Code::kDeadlineExceeded,
                  fmt::format("{} sent message bodies still unsent at the deadline", state_->in_flight));
  }
  return Status::ok_status();
}

void MessageView::copy_to(std::byte* destination) const {
  if (!first.empty()) std::memcpy(destination, first.data(), first.size());
  if (!second.empty()) std::memcpy(destination + first.size(), second.data(), second.size());
}

Status Transport::recv(int from, uint64_t tag, std::vector<std::byte>* out, Clock::time_point deadline) {
  Received message;
  RILL_RETURN_IF_ERROR(recv_message(from, tag, deadline, &message));
  out->resize(message.size());
  message.view().copy_to(out->data());
  return Status::ok_status();
}

Status Transport::set_peer_endpoint(int rank, const Endpoint& endpoint) {
  return Status(Code::kFailedPrecondition,
                fmt::format("rank {}: cannot move rank {} to {}:{}: this data plane's ranks have no addresses",
                            this->rank(), rank, endpoint.address, endpoint.port));
}

std::string describe_tag(uint64_t tag) { return fmt::format("tag {:#x}", tag); }

}  // namespace rill::comm
