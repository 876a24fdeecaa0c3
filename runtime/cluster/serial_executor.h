// Runs posted tasks one after another on a thread of its own, so that the
// thread posting them (an agent's control loop) never waits for one: not for
// a plan being built, a dataset being read or a run winding down. The
// destructor runs what is queued, then joins.
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "base/mutex.h"

namespace rill {

class SerialExecutor {
 public:
  SerialExecutor() : thread_([this] { loop(); }) {}
  ~SerialExecutor() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  void post(std::function<void()> task) {
    {
      MutexLock lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    MutexLock lock(mu_);
    for (;;) {
      while (!stopping_ && tasks_.empty()) cv_.wait(mu_);
      if (tasks_.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      mu_.unlock();  // the task runs without the lock
      task();
      mu_.lock();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;                       // last: starts after the rest is built
};

}  // namespace rill
