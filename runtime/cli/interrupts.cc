#include "runtime/cli/interrupts.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace rill::interrupts {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_count{0};
std::atomic<int> g_first{0};
int g_exit_at = 2;
char g_remove[4096] = {};  // remove_when_ended's path ("" for none)

void say(const char* text) { (void)!::write(STDERR_FILENO, text, std::strlen(text)); }

void on_signal(int signal) {
  const int n = g_count.fetch_add(1) + 1;
  if (n == 1) {
    g_first.store(signal);
    g_stop.store(true);
    say(signal == SIGTERM ? "\nrill: SIGTERM: stopping the job after the step under way (again: at once)\n"
                          : "\nrill: interrupted: stopping the job after the step under way (Ctrl-C again: at once)\n");
  } else if (n >= g_exit_at) {
    say("\nrill: interrupted again: stopped at once\n");
    if (g_remove[0] != '\0') ::unlink(g_remove);
    ::_exit(128 + g_first.load());
  } else {
    say("\nrill: interrupted again: stopping at once\n");
  }
}

}  // namespace

void install(int exit_at) {
  static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
                "a signal handler may only touch lock-free atomics");
  g_exit_at = exit_at < 2 ? 2 : exit_at;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void remove_when_ended(const std::string& path) {
  if (path.size() < sizeof g_remove) std::memcpy(g_remove, path.c_str(), path.size() + 1);
}

const std::atomic<bool>& stop_requested() { return g_stop; }
const std::atomic<int>& counter() { return g_count; }
int first_signal() { return g_first.load(); }

}  // namespace rill::interrupts
