#include "tests/net/net_bed.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace rill::testing {
namespace {

constexpr const char* kInterface = "eth0";

// A network namespace of its own: a child unshares one and waits while this
// process opens it; then the child exits and the descriptor alone keeps the
// namespace. -1 (errno set) when none can be made.
int new_namespace() {
  int ready[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return -1;
  if (pipe2(hold, O_CLOEXEC) != 0) {
    close(ready[0]);
    close(ready[1]);
    return -1;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    close(hold[1]);
    char made = unshare(CLONE_NEWNET) == 0 ? 1 : 0;
    (void)!write(ready[1], &made, 1);
    (void)!read(hold[0], &made, 1);  // until the parent has opened it
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  char made = 0;
  int fd = -1;
  if (pid > 0 && read(ready[0], &made, 1) == 1 && made)
    fd = open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC);
  const int saved = errno;
  close(ready[0]);
  close(hold[1]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  errno = made ? saved : EPERM;
  return fd;
}

std::string fd_path(int fd) { return "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd); }

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

// argv run in namespace `ns` to its end (at most 30 s), stdout and stderr
// captured.
NetBedRun run_in(int ns, const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + std::string(strerror(errno)));
  const pid_t pid = fork();
  if (pid == 0) {
    if (setns(ns, CLONE_NEWNET) != 0) _exit(126);
    dup2(out[1], 1);
    dup2(out[1], 2);
    alarm(30);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  NetBedRun ran;
  char buffer[4096];
  ssize_t n;
  while ((n = read(out[0], buffer, sizeof buffer)) > 0) ran.output.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid)
    ran.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return ran;
}

bool on_path(const char* tool) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin"})
    if (access((std::string(dir) + "/" + tool).c_str(), X_OK) == 0) return true;
  return false;
}

// A burst that lets tbf reach its rate with this kernel's timers: 4 ms of
// traffic, at least 64 KiB (a GSO packet).
std::string burst_for(const std::string& rate) {
  double bits = std::strtod(rate.c_str(), nullptr);
  if (rate.find("gbit") != std::string::npos) bits *= 1e9;
  else if (rate.find("mbit") != std::string::npos) bits *= 1e6;
  else if (rate.find("kbit") != std::string::npos) bits *= 1e3;
  const long long bytes = std::max<long long>(65536, static_cast<long long>(bits / 8 * 0.004));
  return std::to_string(bytes);
}

}  // namespace

std::string NetBed::unavailable() {
  if (geteuid() != 0) return "not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN";
  for (const char* tool : {"ip", "tc", "nsenter", "setpriv"})
    if (!on_path(tool)) return std::string(tool) + " is not installed (iproute2, util-linux)";
  const int ns = new_namespace();
  if (ns < 0) return "cannot make a network namespace: " + std::string(strerror(errno));
  std::string why;
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {"ip", "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1"},
           {"ip", "link", "add", "name", "probebr", "type", "bridge"},
           {"tc", "qdisc", "add", "dev", "probe0", "root", "tbf", "rate", "1mbit", "burst", "65536", "latency",
            "100ms"}}) {
    NetBedRun ran = run_in(ns, argv);
    if (ran.code != 0) {
      why = fmt::format("`{}` fails: {}", joined(argv), ran.output);
      break;
    }
  }
  close(ns);
  return why;
}

NetBed::NetBed(int nodes, const std::vector<std::string>& rates) {
  if (nodes < 1 || nodes > 250) throw std::invalid_argument("a bed has 1 to 250 nodes, not " + std::to_string(nodes));
  try {
    bridge_ = new_namespace();
    if (bridge_ < 0) throw std::runtime_error("cannot make a network namespace: " + std::string(strerror(errno)));
    run(-1, {"ip", "link", "add", "name", "br0", "type", "bridge"});
    run(-1, {"ip", "link", "set", "dev", "br0", "up"});
    for (int n = 0; n < nodes; ++n) {
      const int ns = new_namespace();
      if (ns < 0) throw std::runtime_error("cannot make a network namespace: " + std::string(strerror(errno)));
      nodes_.push_back(ns);
      const std::string port = "port" + std::to_string(n);
      run(-1, {"ip", "link", "add", "name", port, "type", "veth", "peer", "name", kInterface, "netns", fd_path(ns)});
      run(-1, {"ip", "link", "set", "dev", port, "master", "br0"});
      run(-1, {"ip", "link", "set", "dev", port, "up"});
      run(n, {"ip", "addr", "add", address(n) + "/24", "dev", kInterface});
      run(n, {"ip", "link", "set", "dev", kInterface, "up"});
      run(n, {"ip", "link", "set", "dev", "lo", "up"});
      if (static_cast<size_t>(n) < rates.size() && !rates[static_cast<size_t>(n)].empty())
        set_rate(n, rates[static_cast<size_t>(n)]);
    }
  } catch (...) {
    release();
    throw;
  }
}

NetBed::~NetBed() { release(); }

void NetBed::release() {
  kill_all();
  for (int fd : nodes_) close(fd);
  nodes_.clear();
  if (bridge_ >= 0) close(bridge_);
  bridge_ = -1;
}

std::string NetBed::address(int node) { return "10.213.0." + std::to_string(node + 1); }

std::string NetBed::machines(int port) const {
  std::string out;
  for (int n = 0; n < nodes(); ++n) {
    if (n) out += ',';
    out += address(n);
    if (port) out += fmt::format(":{}", port);
  }
  return out;
}

std::string NetBed::exec_prefix(int node) const {
  return "nsenter --net=" + fd_path(ns_fd(node)) + " setpriv --pdeathsig KILL";
}

NetBedRun NetBed::run(int node, const std::vector<std::string>& argv) const {
  NetBedRun ran = run_in(ns_fd(node), argv);
  if (ran.code != 0)
    throw std::runtime_error("`" + joined(argv) + "` in " + (node < 0 ? "the bridge's" : "node " + std::to_string(node) + "'s") +
                             " namespace failed (" + std::to_string(ran.code) + "): " + ran.output);
  return ran;
}

void NetBed::set_rate(int node, const std::string& rate) {
  const std::string port = "port" + std::to_string(node);
  for (auto [ns, dev] : {std::pair{node, std::string(kInterface)}, std::pair{-1, port}}) {
    if (rate.empty()) {
      run_in(ns_fd(ns), {"tc", "qdisc", "del", "dev", dev, "root"});  // none there is fine
      continue;
    }
    run(ns, {"tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", burst_for(rate), "latency",
             "100ms"});
  }
}

void NetBed::set_link(int node, bool up) {
  run(-1, {"ip", "link", "set", "dev", "port" + std::to_string(node), up ? "up" : "down"});
}

// From /proc/net/dev, which shows the reading process's namespace (sysfs
// shows the one it was mounted in): "eth0: RX bytes packets ... TX bytes ...".
long long NetBed::counter(int node, bool sent) const {
  NetBedRun ran = run(node, {"cat", "/proc/net/dev"});
  const std::string label = std::string(kInterface) + ":";
  const size_t at = ran.output.find(label);
  if (at == std::string::npos) throw std::runtime_error("no " + label + " in node " + std::to_string(node) + "'s /proc/net/dev");
  std::istringstream fields(ran.output.substr(at + label.size()));
  long long value = 0;
  for (int i = 0; i <= (sent ? 8 : 0); ++i) fields >> value;
  return value;
}

long long NetBed::sent_bytes(int node) const { return counter(node, true); }
long long NetBed::received_bytes(int node) const { return counter(node, false); }

int NetBed::kill_all() const {
  std::vector<std::pair<dev_t, ino_t>> ours;
  for (int fd : nodes_) {
    struct stat st{};
    if (fstat(fd, &st) == 0) ours.emplace_back(st.st_dev, st.st_ino);
  }
  struct stat st{};
  if (bridge_ >= 0 && fstat(bridge_, &st) == 0) ours.emplace_back(st.st_dev, st.st_ino);
  std::set<int> killed;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int round = 0; round < 100 && std::chrono::steady_clock::now() < deadline; ++round) {
    int found = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      struct stat ns{};
      if (stat(("/proc/" + name + "/ns/net").c_str(), &ns) != 0) continue;
      for (const auto& [dev, ino] : ours)
        if (ns.st_dev == dev && ns.st_ino == ino) {
          const int pid = std::atoi(name.c_str());
          if (::kill(pid, SIGKILL) == 0) {
            killed.insert(pid);
            ++found;
          }
          break;
        }
    }
    if (found == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return static_cast<int>(killed.size());
}

}  // namespace rill::testing
