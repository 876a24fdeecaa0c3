// `rill agent`: this node's agent (node 0 is the master), with the machine
// list, its devices, its key and the limits of its ports; it runs until
// the cluster shuts down.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "base/file_access.h"
#include "base/safe_files.h"
#include "comm/cluster_key.h"
#include "comm/default_key.h"
#include "comm/transport.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/key_flags.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/cluster_config.h"

namespace rill::cli {
namespace {

int start_agent(const std::string& machines, int ctrl_port, const std::string& address, AgentOptions options) {
  auto list = parse_machine_list(machines, ctrl_port);
  if (!list.ok()) return fail_command(list.status());
  options.machines = *list;
  if (!address.empty() && options.rank >= 0 && options.rank < static_cast<int>(options.machines.size())) {
    // The nodes find the master at its entry of the list: it cannot move.
    if (options.rank == 0)
      return fail_command(invalid_argument("--address {}: node 0 (the master) listens at its entry of the machine "
                                           "list, {}, where the other nodes look for it",
                                           address, format_machine(options.machines[0])));
    auto at = parse_machine(address, options.machines[options.rank].ctrl_port, "--address");
    if (!at.ok()) return fail_command(at.status());
    // The others reach it there: an address literal (the master checks it
    // too), in its one spelling.
    auto spelled = reachable_address(at->address, "--address");
    if (!spelled.ok()) return fail_command(spelled.status());
    options.at = {*spelled, at->ctrl_port};
  }
  if (options.heartbeat_s <= 0 || options.dead_after_s <= options.heartbeat_s)
    return fail_command(invalid_argument("--dead-after ({} s) must be longer than --heartbeat ({} s), which must be "
                                         "positive",
                                         options.dead_after_s, options.heartbeat_s));
  // A connection closed while heartbeats came is a gone process; one silent
  // for link_timeout_s a cut link: heartbeats must come well within it.
  if (options.link_timeout_s < 2 * options.heartbeat_s)
    return fail_command(invalid_argument("--link-timeout ({} s) must be at least twice --heartbeat ({} s)",
                                         options.link_timeout_s, options.heartbeat_s));
  // The master writes job-ID.jsonl there: a folder that is not there, or
  // cannot be written, is found now, not when the first job fails.
  if (!options.metrics_dir.empty()) {
    struct stat st{};
    if (::stat(options.metrics_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fail_command(invalid_argument("--metrics-dir {}: no such folder", options.metrics_dir));
    if (::access(options.metrics_dir.c_str(), W_OK | X_OK) != 0)
      return fail_command(invalid_argument("--metrics-dir {}: {}", options.metrics_dir, std::strerror(errno)));
  }
  // --key and --insecure are in the environment by now; a loopback agent
  // without either makes (or reads) the user's default key.
  const Machine& self = options.rank >= 0 && options.rank < static_cast<int>(options.machines.size())
                            ? options.own_machine()
                            : options.machines[0];
  auto key = comm::agent_key(is_loopback_address(self.address));
  if (!key.ok()) return fail_command(key.status());
  options.key = *key;
  // A key handed down in memory (`rill run --nodes`: RILL_KEY_FILE is
  // /proc/self/fd/N) goes no further than this agent: nothing it starts
  // (a renderer, a shell) inherits the descriptor.
  if (const char* named = std::getenv(comm::kKeyFileEnv); named != nullptr) {
    int fd = -1;
    if (std::sscanf(named, "/proc/self/fd/%d", &fd) == 1 && fd > 2) (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  // The user's default key, where this agent runs with another: no job
  // reads it either (base/file_access.h), though a root may hold it (`rill
  // run --nodes` gives its agents /).
  if (auto path = comm::default_key_path(); options.key && path.ok()) {
    const int fd = ::open(path->c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) guard_key_file(fd, st);
    else if (fd >= 0) ::close(fd);
  }
  comm::keep_large_buffers_mapped();  // the data plane's large messages reuse their pages
  Status status = run_agent(options);
  if (!status.ok()) return fail_command(status);
  return 0;
}

class AgentCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("agent", "Run this node's agent (node 0 is the master)");
    app_->add_option("--machines", machines_, "Machine list: addr[:port],... or a file with one per line")->required();
    app_->add_option("--rank", options_.rank, "This node's index in the machine list")->required();
    app_->add_option("--address", address_,
                     "Listen at ADDRESS[:CTRL_PORT] instead of this rank's entry in the machine list (an agent taking "
                     "a lost node's place on another machine; not node 0); the data port is the control port + 1");
    app_->add_option("--ctrl-port", ctrl_port_, "Control port where an entry gives none (data port: +1)")
        ->check(CLI::Range(1, kMaxCtrlPort));
    app_->add_option("--devices", options_.devices, "This node's devices, e.g. cpu:2")->capture_default_str();
    app_->add_option("--join-timeout", options_.join_timeout_s, "Seconds for the cluster to form")->check(positive());
    app_->add_option("--stall-timeout", options_.stall_timeout_s, "Stop a job when no actor acts for this many seconds")
        ->check(positive());
    app_->add_option("--heartbeat", options_.heartbeat_s, "Seconds between heartbeats")->capture_default_str();
    app_->add_option("--dead-after", options_.dead_after_s,
                     "The master declares a node lost after this many seconds without a heartbeat")
        ->capture_default_str();
    app_->add_option("--link-timeout", options_.link_timeout_s,
                     "The data plane gives up on a connection that carried nothing this many seconds (a cut link; "
                     "its node joins again once the link is back)")
        ->check(CLI::Range(0.001, 86400.0))
        ->capture_default_str();
    app_->add_option("--log", log_, "Write this agent's output to this file instead of the terminal");
    app_->add_option("--max-message-bytes", options_.max_message_bytes,
                     "The largest message taken on the control and data ports (a larger one drops its connection)")
        ->capture_default_str()
        ->check(CLI::Range(size_t{4} << 20, size_t{1} << 40));  // collectives move 1 MiB pieces
    app_->add_option("--http", options_.http,
                     fmt::format("The master's metrics and status over HTTP: ADDRESS:PORT, or off (default {})",
                                 kDefaultHttp));
    app_->add_option("--metrics-dir", options_.metrics_dir,
                     "The master writes each job's metrics here as job-ID.jsonl (JSON lines)");
    app_->add_option("--data-root", options_.data_roots,
                     "A folder submitted jobs may read datasets from (repeatable; default: the working folder, "
                     "/usr/share, /tmp)");
    app_->add_option("--checkpoint-root", options_.checkpoint_roots,
                     "A folder submitted jobs may write checkpoints to and resume from (repeatable; default: the "
                     "working folder, /tmp)");
    app_->add_option("--control-send-hwm", options_.control_send_hwm,
                     "ZeroMQ's send high-water mark on the control sockets (tests)")
        ->group("");
    app_->add_option("--checkpoint-write-delay", options_.checkpoint_write_delay_s,
                     "Make every checkpoint write this many seconds slower (tests: a slow disk)")
        ->group("");
    app_->add_option("--control-fault", control_fault_,
                     "Inject a fault into this agent's control messages (tests): KIND:MESSAGE[:SECONDS]")
        ->group("");
    key_.add_key(app_);
    key_.add_insecure(app_,
                      "Run without a cluster key (none is made or read): anyone who reaches its ports can run jobs");
  }

  int act() override {
    if (int code = key_.apply(/*client_key_does=*/false); code != 0) return code;
    if (!log_.empty()) {
      auto log = open_for_write(log_, true, "the log file");
      if (!log.ok()) return fail_command(log.status());
      std::fflush(stdout);
      dup2(*log, STDOUT_FILENO);
      dup2(*log, STDERR_FILENO);
      ::close(*log);
    }
    options_.insecure = comm::insecure_from_environment();
    auto fault = parse_control_fault(control_fault_);
    if (!fault.ok()) return fail_command(fault.status());
    options_.fault = *fault;
    return start_agent(machines_, ctrl_port_, address_, options_);
  }

 private:
  std::string machines_, address_, log_, control_fault_;
  int ctrl_port_ = kDefaultCtrlPort;
  AgentOptions options_;  // its defaults are the flags'
  KeyFlags key_;
};

}  // namespace

std::unique_ptr<Command> agent_command() { return std::make_unique<AgentCommand>(); }

}  // namespace rill::cli
