// Ctrl-C (SIGINT) and SIGTERM while a command runs a job: the first asks the
// job to stop at the next step boundary (it ends there on every node, with a
// checkpoint when it has a checkpoint dir, and says what was kept); a later
// one, the `exit_at`-th, ends the process at once. The handler only stores,
// writes a line to stderr and, at the last, calls _exit: async-signal-safe.
// install() from the main thread; the rest from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>

namespace rill::interrupts {

// Takes SIGINT and SIGTERM from now on; the `exit_at`-th ends the process
// with 128 + its number (>= 2).
void install(int exit_at);
// Instead, for a launcher whose children do the work: each SIGINT or
// SIGTERM a process sent (kill, Slurm) is passed on to every process
// forward_to() named (they end as they choose; the launcher waits for
// them); one from the terminal reached them already. Each is counted; the
// `exit_at`-th ends the launcher at once.
void install_forwarding(int exit_at);
// A child to pass signals on to (at most 64 at once; from the main thread):
// forget() it before reaping it, so its pid, once reused, gets nothing.
void forward_to(pid_t pid);
void forget(pid_t pid);
// Set by the first: what JobRunOptions::stop reads.
const std::atomic<bool>& stop_requested();
// How many came so far (what SubmitOptions::interrupts reads), and the
// number of the first (0: none).
const std::atomic<int>& counter();
inline int count() { return counter().load(); }
int first_signal();
// The exit code of a command whose job was stopped: 128 + the signal.
inline int exit_code() { return 128 + first_signal(); }

}  // namespace rill::interrupts
