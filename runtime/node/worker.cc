#include "runtime/node/worker.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include <fmt/format.h>

#include "base/actor_id.h"

namespace rill {

// The outbox actors of this worker send through: same-thread messages go to
// the lock-free local list, the rest to the router.
class Worker::Sender : public Outbox {
 public:
  explicit Sender(Worker* worker) : worker_(worker) {}
  void send(const ActorMsg& msg) override {
    Worker& w = *worker_;
    if (ActorId::thread_key(msg.dst) == w.thread_key_) {
      w.local_.push_back(msg);
    } else if (w.cuda_ && (w.acting_ || w.holding())) {
      w.held_.push_back(msg);
      // Sent between acts: after what is held already, with the last mark.
      if (!w.acting_) w.marks_.back().end = w.held_.size();
    } else {
      w.route_(msg);
    }
  }

 private:
  Worker* worker_;
};

Worker::Worker(uint64_t thread_key, int micro_batches, std::function<void(const ActorMsg&)> route,
               std::function<void(const Status&)> on_error, std::atomic<int64_t>* progress,
               std::atomic<int64_t>* busy_ns)
    : thread_key_(thread_key),
      micro_batches_(micro_batches),
      route_(std::move(route)),
      on_error_(std::move(on_error)),
      progress_(progress),
      busy_ns_(busy_ns) {
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
    MutexLock lock(mu_);
    queue_.push_back(msg);
    depth_.store(static_cast<int64_t>(queue_.size()), std::memory_order_relaxed);
    incoming_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
}

void Worker::stop() {
  {
    MutexLock lock(mu_);
    stop_.store(true, std::memory_order_relaxed);
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
  ready_.push_back({actor->next_micro(micro_batches_), seq_++, index});
  std::push_heap(ready_.begin(), ready_.end(), std::greater<>());
}

void Worker::drain_local(Outbox& outbox) {
  for (size_t i = 0; i < local_.size(); ++i) {
    ActorMsg msg = local_[i];  // dispatch may grow local_
    dispatch(msg, outbox);
  }
  local_.clear();
}

bool Worker::take_external(Outbox& outbox) {
  if (!incoming_.load(std::memory_order_acquire)) return false;
  {
    MutexLock lock(mu_);
    batch_.swap(queue_);
    depth_.store(0, std::memory_order_relaxed);
    incoming_.store(false, std::memory_order_relaxed);
  }
  for (const ActorMsg& msg : batch_) dispatch(msg, outbox);
  batch_.clear();
  return true;
}

void Worker::publish() {
  progress_->fetch_add(unpublished_, std::memory_order_relaxed);
  acts_total_.fetch_add(unpublished_, std::memory_order_relaxed);
  unpublished_ = 0;
  if (busy_ns_) busy_ns_->fetch_add(unpublished_ns_, std::memory_order_relaxed);
  busy_total_ns_.fetch_add(unpublished_ns_, std::memory_order_relaxed);
  unpublished_ns_ = 0;
}

bool Worker::mark_held(Actor* actor) {
  const size_t marked = marks_head_ < marks_.size() ? marks_.back().end : held_head_;
  if (held_.size() == marked && !tracing_) return true;  // nothing to hold for
  auto ticket = cuda_->record(actor->name().c_str());
  if (!ticket.ok()) {
    failed_ = true;
    on_error_(ticket.status().with_context(fmt::format("actor '{}' act {}", actor->name(), actor->acts() - 1)));
    return false;
  }
  marks_.push_back({*ticket, held_.size(), actor, actor->acts() - 1});
  return true;
}

bool Worker::release_completed() {
  while (marks_head_ < marks_.size()) {
    const Mark& mark = marks_[marks_head_];
    auto done = cuda_->done(mark.ticket, mark.actor->name().c_str());
    if (!done.ok()) {
      failed_ = true;
      on_error_(done.status().with_context(
          fmt::format("the GPU work of cuda:{} up to actor '{}' act {}", cuda_->device(), mark.actor->name(), mark.act)));
      return false;
    }
    if (!*done) break;
    if (tracing_) mark.actor->trace_done(mark.act);
    for (; held_head_ < mark.end; ++held_head_) route_(held_[held_head_]);
    ++marks_head_;
  }
  if (marks_head_ == marks_.size()) {
    marks_.clear();
    marks_head_ = 0;
    held_.clear();
    held_head_ = 0;
  } else if (marks_head_ >= 1024 && marks_head_ * 2 >= marks_.size()) {
    // Never idle long enough to empty: drop what was released (no allocation).
    for (size_t i = marks_head_; i < marks_.size(); ++i) marks_[i].end -= held_head_;
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(held_head_));
    held_head_ = 0;
    marks_.erase(marks_.begin(), marks_.begin() + static_cast<std::ptrdiff_t>(marks_head_));
    marks_head_ = 0;
  }
  return true;
}

bool Worker::release_all() {
  while (holding() && !stop_.load(std::memory_order_relaxed)) {
    if (!release_completed()) return false;
    if (holding()) std::this_thread::yield();
  }
  return !stop_.load(std::memory_order_relaxed);
}

void Worker::run() {
  Sender sender(this);
  queued_.assign(by_index_->size(), 0);
  ready_.reserve(actors_.size());
  if (cuda_) {
    held_.reserve(1024);
    marks_.reserve(1024);
    for (Actor* actor : actors_) tracing_ = tracing_ || actor->tracing();
    Status active = cuda_->activate("a device thread");
    if (!active.ok()) {
      failed_ = true;
      on_error_(active);
    }
  }
  for (Actor* actor : actors_) {
    actor->finish_if_done(sender);
    mark_ready(actor);
  }
  // Same-thread messages first (what the last act sent), then acts while
  // any actor can act, then other threads' messages; wait when none came.
  // A GPU's thread also sends what completed work held, and polls for it
  // rather than sleep while anything is held.
  while (!failed_ && !stop_.load(std::memory_order_relaxed)) {
    drain_local(sender);
    if (failed_) break;
    if (holding() && !release_completed()) break;
    if (!ready_.empty()) {
      std::pop_heap(ready_.begin(), ready_.end(), std::greater<>());
      Actor* actor = (*by_index_)[ready_.back().actor];
      ready_.pop_back();
      queued_[ActorId::index(actor->id())] = 0;
      // An act meeting other threads on the host: what this GPU's thread
      // holds for them goes first (the work it waits for is enqueued ahead
      // of the act, which would wait for it anyway), or one of them might
      // wait for it before it comes, and this act for that one.
      if (holding() && actor->meets_on_host() && !release_all()) break;
      const auto began = std::chrono::steady_clock::now();
      acting_ = cuda_ != nullptr;
      Status status = actor->act_once(sender);
      acting_ = false;
      unpublished_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count();
      if (!status.ok()) {
        failed_ = true;
        on_error_(status);
        break;
      }
      if (cuda_ && !mark_held(actor)) break;
      mark_ready(actor);
      // Published in batches (and before waiting): one shared counter
      // touched by every act of every thread would bounce between cores.
      if (++unpublished_ == 64) publish();
      continue;
    }
    if (take_external(sender)) continue;
    publish();
    if (holding()) {
      std::this_thread::yield();
      continue;
    }
    if (all_retired()) break;
    MutexLock lock(mu_);
    while (!stop_.load(std::memory_order_relaxed) && queue_.empty()) cv_.wait(mu_);
  }
  finished_.store(true);
}

}  // namespace rill
