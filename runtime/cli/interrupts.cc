#include "runtime/cli/interrupts.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rill::interrupts {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_count{0};
std::atomic<int> g_first{0};
int g_exit_at = 2;
constexpr int kMaxForwarded = 64;
std::atomic<pid_t> g_forward[kMaxForwarded] = {};  // install_forwarding's children (0: none)

void say(const char* text) { (void)!::write(STDERR_FILENO, text, std::strlen(text)); }

void on_signal(int signal) {
  const int saved = errno;  // the code the signal interrupted may be about to read it
  const int n = g_count.fetch_add(1) + 1;
  if (n == 1) {
    g_first.store(signal);
    g_stop.store(true);
    say(signal == SIGTERM ? "\nrill: SIGTERM: stopping the job after the step under way (again: at once)\n"
                          : "\nrill: interrupted: stopping the job after the step under way (Ctrl-C again: at once)\n");
  } else if (n >= g_exit_at) {
    say("\nrill: interrupted again: stopped at once\n");
    ::_exit(128 + g_first.load());
  } else {
    say("\nrill: interrupted again: stopping at once\n");
  }
  errno = saved;
}

// A signal sent by a process (kill, Slurm, a supervisor) is passed on; one
// the terminal sent to its foreground group (Ctrl-C) reached the children
// already, and is only counted.
void on_signal_forwarded(int signal, siginfo_t* info, void*) {
  const int saved = errno;
  const int n = g_count.fetch_add(1) + 1;
  if (n == 1) {
    g_first.store(signal);
    g_stop.store(true);
  }
  if (n >= g_exit_at) {
    say("\nrill: interrupted again: stopped at once\n");
    ::_exit(128 + g_first.load());
  }
  const bool sent = info != nullptr && (info->si_code == SI_USER || info->si_code == SI_QUEUE ||
                                        info->si_code == SI_TKILL);
  say(!sent ? "\nrill: interrupted: the launched processes and the agent stop too\n"
      : signal == SIGTERM ? "\nrill: SIGTERM: passed on to the launched processes and the agent\n"
                          : "\nrill: interrupted: passed on to the launched processes and the agent\n");
  if (sent)
    for (int i = 0; i < kMaxForwarded; ++i)
      if (const pid_t pid = g_forward[i].load(); pid > 0) ::kill(pid, signal);
  errno = saved;
}

void take(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace

void install_forwarding(int exit_at) {
  static_assert(std::atomic<pid_t>::is_always_lock_free, "a signal handler may only touch lock-free atomics");
  g_exit_at = exit_at < 2 ? 2 : exit_at;
  struct sigaction action {};
  action.sa_sigaction = on_signal_forwarded;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void forward_to(pid_t pid) {
  for (int i = 0; i < kMaxForwarded; ++i) {
    pid_t free = 0;
    if (g_forward[i].compare_exchange_strong(free, pid)) break;
  }
  // A signal that came before the child was listed is its too.
  if (g_count.load() > 0) ::kill(pid, g_first.load());
}

void forget(pid_t pid) {
  for (int i = 0; i < kMaxForwarded; ++i) {
    pid_t listed = pid;
    g_forward[i].compare_exchange_strong(listed, 0);
  }
}

void install(int exit_at) {
  static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
                "a signal handler may only touch lock-free atomics");
  g_exit_at = exit_at < 2 ? 2 : exit_at;
  take(on_signal);
}

const std::atomic<bool>& stop_requested() { return g_stop; }
const std::atomic<int>& counter() { return g_count; }
int first_signal() { return g_first.load(); }

}  // namespace rill::interrupts
