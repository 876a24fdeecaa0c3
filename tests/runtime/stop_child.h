// Stopping a forked child at a moment the test chooses, for the tests that
// kill checkpoint writers. SIGSTOP is waited for (waitpid with WUNTRACED),
// and a signal stops a process only between its system calls, so while the
// child is stopped what it left on disk cannot change: a test can look at
// it, decide that this is the moment it wants, and SIGKILL the child there.
// The kill then lands exactly where the look was.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <random>
#include <thread>

namespace rill::testing {

enum class Stopped {
  kLanded,  // `landed()` held: the child is stopped there
  kMissed,  // it never held within the tries: the child is stopped elsewhere
  kEnded,   // the child ended on its own (reaped; its wait status in *status)
};

// Lets `child` run for a random 0 to `run_us` microseconds, stops it and
// asks `landed()`; continues it and tries again if not, `tries` times at
// most. Unless the child ended, it is stopped on return, for the caller to
// kill (SIGKILL ends a stopped process) and reap.
inline Stopped stop_where(pid_t child, std::mt19937& rng, int run_us, int tries, const std::function<bool()>& landed,
                          int* status) {
  for (int t = 0; t < tries; ++t) {
    if (t > 0) ::kill(child, SIGCONT);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<unsigned>(run_us + 1)));
    ::kill(child, SIGSTOP);
    if (::waitpid(child, status, WUNTRACED) != child || !WIFSTOPPED(*status)) return Stopped::kEnded;
    if (landed()) return Stopped::kLanded;
  }
  return Stopped::kMissed;
}

// SIGKILLs `child` (stopped or running) and reaps it; its wait status.
inline int kill_child(pid_t child) {
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

}  // namespace rill::testing
