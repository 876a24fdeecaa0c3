// Worker: one thread that runs a fixed set of actors. Other threads push
// messages into its queue (a mutex and condition variable around a vector that
// is swapped out whole, so steady state allocates nothing); messages an actor
// sends to an actor on the same thread skip the lock.
//
// Messages only change actors' state; the worker then acts one act at a time,
// always for the oldest micro-batch among the actors that can act (ties: the
// one that became ready first, as a queue would). So a
// thread finishes what it has of micro-batch i (its backward, its output to
// the next pipeline stage) before it starts on i + 1: micro-batches stream
// through the stages instead of queueing behind each other. It takes in what
// other threads sent when it has nothing to act on (the slots of 1F1B bound
// how far ahead that lets a stage run).
//
// A GPU's thread (use_device): an act enqueues its work on the device's
// stream and returns. Messages to actors of the same thread leave at once
// (the stream runs their work after it); messages to any other thread (the
// readies of slots the work writes, the acks of slots it reads, and whatever
// the thread sends after them, in order) are held until an event recorded
// after the act says the work is complete. The thread polls its events
// between acts and, with nothing else to do, instead of sleeping: nothing on
// this path waits for the stream.
//
// push() and stop() may be called from any thread; everything else from the
// owner (NodeRuntime) before start() or after join().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "actor/actor.h"
#include "base/mutex.h"

namespace rill {

class Worker {
 public:
  // `route` delivers a message to whichever worker runs its destination.
  // `on_error` is told the first error an actor returns (then the worker stops).
  // `micro_batches`: per step (the plan's), which orders acts.
  // `progress` counts acts; `busy_ns`, where given, the time spent acting
  // (both published in batches, and whenever the thread goes idle).
  Worker(uint64_t thread_key, int micro_batches, std::function<void(const ActorMsg&)> route,
         std::function<void(const Status&)> on_error, std::atomic<int64_t>* progress,
         std::atomic<int64_t>* busy_ns = nullptr);
  ~Worker();

  uint64_t thread_key() const { return thread_key_; }
  void add_actor(Actor* actor) { actors_.push_back(actor); }
  const std::vector<Actor*>& actors() const { return actors_; }

  // The thread runs its actors' work on `cuda`'s stream; call before start().
  void use_device(CudaContext* cuda) { cuda_ = cuda; }
  void start(const std::vector<Actor*>* by_index);
  void push(const ActorMsg& msg);
  void stop();
  void join();
  bool finished() const { return finished_.load(); }
  // This thread's acts and acting time so far (published in batches).
  int64_t acts() const { return acts_total_.load(std::memory_order_relaxed); }
  int64_t busy_ns() const { return busy_total_ns_.load(std::memory_order_relaxed); }
  // Messages from other threads waiting for this one, now.
  int64_t queue_depth() const { return depth_.load(std::memory_order_relaxed); }

 private:
  class Sender;
  void run();
  bool all_retired() const;
  void dispatch(const ActorMsg& msg, Outbox& outbox);
  void drain_local(Outbox& outbox);    // same-thread messages, and those they lead to
  bool take_external(Outbox& outbox);  // other threads' messages; false if none came
  void mark_ready(Actor* actor);
  void publish();  // adds the acts and acting time counted so far to the shared counters
  // A GPU's thread: marks the messages the act of `actor` held with an event
  // (every act when tracing, for its completion time); sends those whose
  // event is complete. false: the device reported an error (failed_ is set).
  bool mark_held(Actor* actor);
  bool release_completed();
  // Releases every held message, waiting for their work (false: stopped or failed).
  bool release_all();
  bool holding() const { return marks_head_ < marks_.size(); }

  uint64_t thread_key_;
  int micro_batches_;
  std::function<void(const ActorMsg&)> route_;
  std::function<void(const Status&)> on_error_;
  std::atomic<int64_t>* progress_;
  std::atomic<int64_t>* busy_ns_;
  std::atomic<int64_t> acts_total_{0};
  std::atomic<int64_t> busy_total_ns_{0};
  std::atomic<int64_t> depth_{0};  // queue_.size(), for queue_depth()
  std::vector<Actor*> actors_;
  const std::vector<Actor*>* by_index_ = nullptr;
  std::thread thread_;

  Mutex mu_;
  CondVar cv_;
  std::vector<ActorMsg> queue_ GUARDED_BY(mu_);
  // Set under mu_ (so a waiting owner cannot miss it); the owner also reads
  // it between acts, without the lock.
  std::atomic<bool> stop_{false};
  // Set under mu_ with every push, cleared under mu_ when taken: lets the
  // owner skip the lock when nothing came.
  std::atomic<bool> incoming_{false};

  std::vector<ActorMsg> batch_;  // owner thread only
  std::vector<ActorMsg> local_;  // owner thread only: same-thread messages
  // Owner thread only: the actors that can act, a min-heap on (next_micro,
  // when it became ready).
  struct Ready {
    int64_t micro;
    uint64_t seq;
    uint32_t actor;  // its index
    bool operator>(const Ready& o) const { return micro != o.micro ? micro > o.micro : seq > o.seq; }
  };
  std::vector<Ready> ready_;
  uint64_t seq_ = 0;          // owner thread only: the next Ready::seq
  std::vector<char> queued_;  // owner thread only: by actor index, whether in ready_
  int64_t unpublished_ = 0;   // owner thread only: acts not yet added to *progress_
  int64_t unpublished_ns_ = 0;  // owner thread only: acting time not yet added to *busy_ns_
  std::atomic<bool> finished_{false};
  bool failed_ = false;

  // A GPU's thread only (owner thread): messages to other threads held until
  // their event is complete, in the order sent; marks_[i] releases
  // held_[... marks_[i].end).
  CudaContext* cuda_ = nullptr;
  bool acting_ = false;
  struct Mark {
    uint64_t ticket;
    size_t end;     // in held_
    Actor* actor;   // whose act the event follows
    int64_t act;    // that act's index
  };
  std::vector<ActorMsg> held_;
  size_t held_head_ = 0;
  std::vector<Mark> marks_;
  size_t marks_head_ = 0;
  bool tracing_ = false;
};

}  // namespace rill
