// netbed: runs a command beside a network of N namespaces (tests/net/net_bed.h)
// and removes the network, and every process in it, when the command ends or
// netbed is interrupted. For benches written in shell:
//
//   netbed --nodes 2 --rate 1gbit -- sh -c '$NETBED_NS_0 build/rill agent ...'
//
// The command runs in the host's namespace with, for each node n,
// NETBED_NS_n (a prefix that runs what follows in node n's namespace),
// NETBED_ADDR_n, and NETBED_NODES and NETBED_MACHINES (every address, comma
// separated). `--rate R` limits every node's link, `--rates R0,R1,...` each
// ("" or "-": no limit). Exits with the command's code (77: no bed can be
// made here, and why on stderr).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/net/net_bed.h"

namespace {

volatile sig_atomic_t interrupted = 0;
void on_signal(int signal) { interrupted = signal; }

int usage() {
  std::fprintf(stderr, "usage: netbed --nodes N [--rate R | --rates R0,R1,...] -- COMMAND [ARGS...]\n");
  return 2;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item == "-" ? "" : item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 0;
  std::string rate;
  std::vector<std::string> rates;
  int at = 1;
  for (; at < argc && std::strcmp(argv[at], "--") != 0; ++at) {
    const std::string flag = argv[at];
    if (at + 1 >= argc) return usage();
    if (flag == "--nodes") nodes = std::atoi(argv[++at]);
    else if (flag == "--rate") rate = argv[++at];
    else if (flag == "--rates") rates = split(argv[++at]);
    else return usage();
  }
  if (nodes < 1 || at + 1 >= argc) return usage();
  if (!rate.empty()) rates.assign(static_cast<size_t>(nodes), rate);
  const std::string why = rill::testing::NetBed::unavailable();
  if (!why.empty()) {
    std::fprintf(stderr, "netbed: no network namespaces here: %s\n", why.c_str());
    return 77;
  }
  struct sigaction action{};
  action.sa_handler = on_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);
  try {
    rill::testing::NetBed bed(nodes, rates);
    setenv("NETBED_NODES", std::to_string(nodes).c_str(), 1);
    setenv("NETBED_MACHINES", bed.machines().c_str(), 1);
    for (int n = 0; n < nodes; ++n) {
      setenv(("NETBED_NS_" + std::to_string(n)).c_str(), bed.exec_prefix(n).c_str(), 1);
      setenv(("NETBED_ADDR_" + std::to_string(n)).c_str(), rill::testing::NetBed::address(n).c_str(), 1);
    }
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(137);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      execvp(argv[at + 1], argv + at + 1);
      std::fprintf(stderr, "netbed: cannot run %s: %s\n", argv[at + 1], std::strerror(errno));
      _exit(127);
    }
    int status = 0;
    bool forwarded = false;
    while (waitpid(child, &status, 0) != child) {
      if (errno != EINTR) break;
      if (interrupted && !forwarded) {
        kill(child, interrupted);
        forwarded = true;
      }
    }
    const int killed = bed.kill_all();
    if (killed > 0) std::fprintf(stderr, "netbed: killed %d process(es) left in the namespaces\n", killed);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "netbed: %s\n", e.what());
    return 1;
  }
}
