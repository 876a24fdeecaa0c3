// Small helpers shared by the `rill` subcommands (runtime/cli/*_command.cc):
// reporting an error as an exit code, reading and writing whole text files,
// a job's timeline, starting and waiting for processes.
// Called from the command's main thread only.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace rill {

struct SubmitResult;  // runtime/cluster/client.h

// Prints "rill: error: MESSAGE" to stderr; returns the exit code 1.
int fail_command(const Status& status);

StatusOr<std::string> read_text_file(const std::string& path);
// "4096", "512KiB", "64MiB", "1.5GiB": a count of bytes, > 0.
StatusOr<int64_t> parse_byte_size(const std::string& text);
// A job file's text with its blocks' includes resolved (graph/job_file.h):
// what goes to a master, which reads no file for a client.
StatusOr<std::string> read_job_text(const std::string& path);
Status write_text_file(const std::string& path, const std::string& text);
// Whether `path` (`what`: "the result file") can be written, found before a
// run rather than after it, leaving nothing behind: a file there is opened
// for appending and closed (its bytes kept); a missing one needs a folder
// to be made in; a pipe is not opened.
Status check_can_write(const std::string& path, const std::string& what);

// A cluster job's timeline, to `path` when one was asked for (not empty)
// and came: a job that failed has none, and one too large for a control
// message is left out (the master's log says so); either is a warning, not
// the job's error.
Status write_job_trace(const std::string& path, const SubmitResult& result);

// Starts argv[0] (searched on PATH) with extra environment variables; its
// output goes to `log` when not empty (appended to with `append`).
// "/proc/self/exe" starts this binary. The process gets SIGTERM when the
// calling thread ends (Linux's parent-death signal): call it from a thread
// that lives as long as the process should, the main one. `own_group`: in a
// process group of its own, so that Ctrl-C at the terminal reaches only the
// caller (which stops the job through the master: an agent).
pid_t spawn_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment = {},
                    const std::string& log = "", bool append = false, bool own_group = false);
// Waits for `pid`; its exit code, or 128 + signal.
// `raw`, when given: the wait status as waitpid gave it (a signal told from
// an exit code above 128).
int wait_process(pid_t pid, int* raw = nullptr);
// Whether a process's wait status is a failure: a non-zero exit or a signal.
bool failed_exit(int wait_status);

}  // namespace rill
