#include "runtime/worker.h"

#include <algorithm>
#include <functional>

#include "base/actor_id.h"

namespace rill {

// The outbox actors of this worker send through: same-thread messages go to
// the lock-free local list, the rest to the router.
class Worker::Sender : public Outbox {
 public:
  explicit Sender(Worker* worker) : worker_(worker) {}
  void send(const ActorMsg& msg) override {
    if (ActorId::thread_key(msg.dst) == worker_->thread_key_) worker_->local_.push_back(msg);
    else worker_->route_(msg);
  }

 private:
  Worker* worker_;
};

Worker::Worker(uint64_t thread_key, int micro_batches, std::function<void(const ActorMsg&)> route,
               std::function<void(const Status&)> on_error, std::atomic<int64_t>* progress)
    : thread_key_(thread_key), micro_batches_(micro_batches), route_(std::move(route)), on_error_(std::move(on_error)), progress_(progress) {
  queue_.reserve(1024);
  batch_.reserve(1024);
  local_.reserve(1024);
}

Worker::~Worker() {
  stop();
  join();
}

void Worker::start(const std::vector<Actor*>* by_index) {
  by_index_ = by_index;
  thread_ = std::thread([this] { run(); });
}

void Worker::push(const ActorMsg& msg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(msg);
  }
  cv_.notify_one();
}

void Worker::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

bool Worker::all_retired() const {
  for (const Actor* actor : actors_)
    if (!actor->retired()) return false;
  return true;
}

void Worker::dispatch(const ActorMsg& msg, Outbox& outbox) {
  if (failed_) return;
  uint32_t index = ActorId::index(msg.dst);
  Actor* actor = index < by_index_->size() ? (*by_index_)[index] : nullptr;
  Status status = actor && actor->id() == msg.dst
                      ? actor->receive(msg, outbox)
                      : internal_error("message for unknown actor {}", ActorId::to_string(msg.dst));
  if (!status.ok()) {
    failed_ = true;
    on_error_(status);
    return;
  }
  mark_ready(actor);
}

void Worker::mark_ready(Actor* actor) {
  const uint32_t index = ActorId::index(actor->id());
  if (queued_[index] || !actor->can_act()) return;
  queued_[index] = 1;
  ready_.emplace_back(actor->next_micro(micro_batches_), index);
  std::push_heap(ready_.begin(), ready_.end(), std::greater<>());
}

bool Worker::take_in(Outbox& outbox) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    batch_.swap(queue_);
  }
  for (const ActorMsg& msg : batch_) dispatch(msg, outbox);
  batch_.clear();
  // Then same-thread messages, those the last act sent and those taking in
  // sent (an end of data); dispatching may add more.
  for (size_t i = 0; i < local_.size(); ++i) {
    ActorMsg msg = local_[i];  // dispatch may grow local_
    dispatch(msg, outbox);
  }
  local_.clear();
  return true;
}

void Worker::run() {
  Sender sender(this);
  queued_.assign(by_index_->size(), 0);
  ready_.reserve(actors_.size());
  for (Actor* actor : actors_) {
    actor->finish_if_done(sender);
    mark_ready(actor);
  }
  while (!failed_) {
    if (!take_in(sender) || failed_) break;
    if (!ready_.empty()) {
      std::pop_heap(ready_.begin(), ready_.end(), std::greater<>());
      Actor* actor = (*by_index_)[ready_.back().second];
      ready_.pop_back();
      queued_[ActorId::index(actor->id())] = 0;
      Status status = actor->act_once(sender);
      if (!status.ok()) {
        failed_ = true;
        on_error_(status);
        break;
      }
      mark_ready(actor);
      progress_->fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (all_retired()) break;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) break;
  }
  finished_.store(true);
}

}  // namespace rill
