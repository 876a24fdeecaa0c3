#include "runtime/cli/command_util.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/safe_files.h"
#include "graph/job_file.h"
#include "kernels/data/file_bytes.h"
#include "runtime/cluster/client.h"

namespace rill {

int fail_command(const Status& status) {
  fmt::print(stderr, "rill: error: {}\n", status.message());
  return 1;
}

StatusOr<int64_t> parse_byte_size(const std::string& text) {
  static constexpr std::pair<const char*, double> kUnits[] = {
      {"GiB", 1024.0 * 1024 * 1024}, {"MiB", 1024.0 * 1024}, {"KiB", 1024.0}};
  std::string number = text;
  double unit = 1;
  for (const auto& [suffix, bytes] : kUnits)
    if (number.size() > std::strlen(suffix) && number.ends_with(suffix)) {
      number.resize(number.size() - std::strlen(suffix));
      unit = bytes;
      break;
    }
  char* end = nullptr;
  const double value = number.empty() ? 0 : std::strtod(number.c_str(), &end);
  const bool digits = !number.empty() && (std::isdigit(static_cast<unsigned char>(number[0])) != 0) &&
                      number.find_first_of("xXpPeE") == std::string::npos;
  if (!digits || end != number.c_str() + number.size() || !(value * unit >= 1) || value * unit > 9e18)
    return invalid_argument("'{}' is not a size in bytes (a decimal number, at least 1 byte, with KiB, MiB or GiB or "
                            "none)",
                            text);
  return static_cast<int64_t>(value * unit);
}

StatusOr<std::string> read_text_file(const std::string& path) {
  RILL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file_bytes(path));
  return std::string(bytes.begin(), bytes.end());
}

StatusOr<std::string> read_job_text(const std::string& path) {
  RILL_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return graph::resolve_includes(text, path);
}

Status write_text_file(const std::string& path, const std::string& text) { return write_file(path, text, "the file"); }

Status check_can_write(const std::string& path, const std::string& what) {
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return invalid_argument("cannot write {} '{}': it is a directory", what, path);
    if (!S_ISREG(st.st_mode)) return {};  // a pipe or a device: opened when written, never here
    RILL_ASSIGN_OR_RETURN(const int fd, open_for_write(path, true, what));  // appending: its bytes are kept
    ::close(fd);
    return {};
  }
  // Not there: its folder must be one to make it in (nothing is made now).
  const std::string folder = parent_folder(path);
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return invalid_argument("cannot write {} '{}': its folder {} does not exist", what, path, folder);
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return invalid_argument("cannot write {} '{}': its folder {}: {}", what, path, folder, std::strerror(errno));
  return {};
}

pid_t spawn_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment,
                    const std::string& log, bool append, bool own_group) {
  const pid_t parent = getpid();
  // The log is opened here: the child of a threaded process may only make
  // async-signal-safe calls before exec. Not writable: the child's output
  // stays on this terminal, with the reason said first.
  int log_fd = -1;
  if (!log.empty()) {
    auto opened = open_for_write(log, append, "the log");
    if (opened.ok()) log_fd = *opened;
    else std::fprintf(stderr, "rill: %s\n", opened.status().message().c_str());
  }
  pid_t pid = fork();
  if (pid != 0) {
    if (log_fd >= 0) ::close(log_fd);
    return pid;
  }
  // The parent's handlers are not the child's: SIGINT and SIGTERM end it
  // until its own program decides otherwise.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  // Ends with the thread that started it (SIGTERM), however that one ends:
  // a killed `rill run --nodes` or launcher leaves no agent holding its ports.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) std::_Exit(1);  // it was gone before the line above
  if (own_group) setpgid(0, 0);
  for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
  if (log_fd >= 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    ::close(log_fd);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "rill: cannot start '%s'\n", args[0]);
  std::_Exit(127);
}

int wait_process(pid_t pid, int* raw) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (raw) *raw = status;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

bool failed_exit(int wait_status) { return !WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0; }

Status write_job_trace(const std::string& path, const SubmitResult& result) {
  if (path.empty() || !result.status.ok()) return {};
  if (result.trace_json.empty()) {
    fmt::print(stderr, "rill: warning: job {} sent no trace (see the master's log)\n", result.job_id);
    return {};
  }
  RILL_RETURN_IF_ERROR(write_text_file(path, result.trace_json));
  fmt::print("trace of job {} written to {}\n", result.job_id, path);
  return {};
}


}  // namespace rill
