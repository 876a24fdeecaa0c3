// Helpers for end-to-end tests that run real processes: the `rill` binary
// (RILL_BINARY) on the source tree's samples (RILL_SOURCE_ROOT), shell
// commands with their output and exit code, and per-test temporary folders.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <doctest/doctest.h>

namespace rill::testing {

struct Ran {
  int code = -1;
  std::string output;  // stdout and stderr
  double seconds = 0;
};

inline std::string root() {
  const char* r = std::getenv("RILL_SOURCE_ROOT");
  return r ? r : ".";
}

inline std::string binary() {
  const char* b = std::getenv("RILL_BINARY");
  REQUIRE(b != nullptr);
  return b;
}

// Runs a shell command to its end, or for `limit_s` seconds: then it is
// killed (exit code 124 or 137, and the output says so), so that a command
// that hangs fails its own check, named, instead of the whole suite's timeout.
inline Ran run_shell(const std::string& command, int limit_s = 240) {
  auto start = std::chrono::steady_clock::now();
  Ran ran;
  const std::string limited = "timeout -k 10 " + std::to_string(limit_s) + " sh -c '" + [&] {
    std::string quoted;
    for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted;
  }() + "'";
  FILE* pipe = popen((limited + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) ran.output.append(buffer.data(), n);
  int status = pclose(pipe);
  ran.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (ran.code == 124 || ran.code == 137)
    ran.output += "\n[killed after " + std::to_string(limit_s) + " s: " + command + "]\n";
  ran.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ran;
}

// Runs `rill ARGS`.
inline Ran run_rill(const std::string& args, int limit_s = 240) { return run_shell(binary() + " " + args, limit_s); }

// The pid of the `rill agent` process with this rank and control port (in
// its machine list, "127.0.0.1:9988,...", or as --ctrl-port's value); -1
// if none.
inline pid_t find_agent(int rank, int port) {
  // Arguments in /proc/PID/cmdline end with a NUL each.
  std::string rank_arg = "--rank";
  rank_arg.push_back('\0');
  rank_arg += std::to_string(rank);
  rank_arg.push_back('\0');
  std::string port_in_list = ":", port_arg(1, '\0'), agent_arg = "agent";
  port_in_list += std::to_string(port);
  port_arg += std::to_string(port);
  port_arg.push_back('\0');
  agent_arg.push_back('\0');
  pid_t found = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry.path().filename().c_str()));
    if (pid <= 0) continue;
    std::ifstream in(entry.path() / "cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(agent_arg) != std::string::npos && cmdline.find(rank_arg) != std::string::npos &&
        (cmdline.find(port_in_list) != std::string::npos || cmdline.find(port_arg) != std::string::npos))
      found = pid;
  }
  return found;
}

inline std::filesystem::path temp_dir(const std::string& prefix) {
  auto dir = std::filesystem::temp_directory_path() / (prefix + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An agent process in the background, its output in a file.
struct Agent {
  pid_t pid = -1;
  std::string log;
  // `wrapper`: a command the agent runs under ("taskset -c 1").
  Agent(const std::string& args, const std::string& log_file, const std::string& wrapper = "") : log(log_file) {
    pid = fork();
    if (pid == 0) {
      std::string command = "exec " + wrapper + " " + binary() + " agent " + args + " > " + log_file + " 2>&1";
      execl("/bin/sh", "sh", "-c", command.c_str(), nullptr);
      std::_Exit(127);
    }
  }
  // Exit code, or -1 if it did not exit within `seconds`.
  int wait(double seconds) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  std::string output() const {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  ~Agent() {
    if (pid > 0) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Holds a TCP port on `address` (listening) for as long as it lives.
class PortHolder {
 public:
  PortHolder(const char* address, int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, address, &addr.sin_addr);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(listen(fd_, 1) == 0);
  }
  ~PortHolder() { close(fd_); }
  PortHolder(const PortHolder&) = delete;
  PortHolder& operator=(const PortHolder&) = delete;

 private:
  int fd_ = -1;
};

// A command on a pseudo-terminal of its own, as a user runs it: it is the
// terminal's foreground process group, so a typed Ctrl-C reaches it as
// SIGINT from the terminal driver.
class Terminal {
 public:
  explicit Terminal(const std::string& command) {
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
      std::_Exit(127);
    }
  }
  ~Terminal() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  // Reads until the output holds `text` (after `from`) or `seconds` pass.
  bool wait_for(const std::string& text, double seconds, size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (output_.find(text, from) == std::string::npos) {
      if (std::chrono::steady_clock::now() >= deadline || !read_some(50)) return false;
    }
    return true;
  }
  void type(const std::string& keys) { REQUIRE(write(fd_, keys.data(), keys.size()) == static_cast<ssize_t>(keys.size())); }
  // Reads to the end and reaps the command: its exit code, or -1 when it
  // did not end within `seconds`.
  int finish(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      const bool open = read_some(50);
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        while (read_some(0)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (!open) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }
  // Whether `done` turned true within `seconds` (polled every 20 ms).
  template <typename Done>
  static bool poll_until(Done done, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

 private:
  // false at the end of the output (the terminal's other side closed).
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return (p.revents & (POLLHUP | POLLERR)) == 0;
    char buffer[4096];
    const ssize_t n = read(fd_, buffer, sizeof buffer);
    if (n <= 0) return false;
    output_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
};

}  // namespace rill::testing
