#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "comm/default_key.h"
#include "runtime/cluster/client.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/cli/cluster_commands.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/interrupts.h"
#include "runtime/cluster/env.h"

namespace rill {
namespace {

// Waits (up to `seconds`) until the master at `master` answers, unless the
// agent `agent` ends first (its port taken, fewer GPUs than slots): then an
// error with how it ended and the last line of its log (`log`; "" when its
// output went to this terminal, above).
Status wait_for_agent(const std::string& master, pid_t agent, const std::string& log, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (interrupts::count() > 0)
      return Status(Code::kAborted, fmt::format("interrupted (signal {}) while waiting for the master {} to answer",
                                                  interrupts::first_signal(), master));
    int status = 0;
    if (waitpid(agent, &status, WNOHANG) == agent) {
      std::string last;
      if (!log.empty()) {
        std::ifstream in(log);
        for (std::string line; std::getline(in, line);)
          if (!line.empty()) last = line;
      }
      return Status(Code::kUnavailable,
                    fmt::format("this node's agent ended ({}) before the master answered{}",
                                WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                                  : fmt::format("signal {}", WTERMSIG(status)),
                                last.empty() ? std::string(" (its words are above)") : ": " + last));
    }
    auto client = Client::connect(master, 1.0);
    if (!client.ok()) return client.status();
    if ((*client)->status().ok()) return {};
    if (std::chrono::steady_clock::now() >= deadline)
      return Status(Code::kDeadlineExceeded,
                    fmt::format("the master {} did not answer within {} s", master, seconds));
  }
}

// Waits for child `pid`, taken off the list signals are passed on to before
// it is reaped (a reaped pid may be another process's soon).
int wait_child(pid_t pid, int* raw = nullptr) {
  siginfo_t info{};
  while (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  interrupts::forget(pid);
  return wait_process(pid, raw);
}

}  // namespace

int launch_command(const LaunchArgs& args) {
  auto config = resolve_launch_config(args.flags, current_environment());
  if (!config.ok()) return fail_command(config.status());
  spdlog::info("launch: {}", describe_sources(*config));
  for (const std::string& note : config->notes) spdlog::warn("launch: {}", note);

  // Every node's address: the flag, else Slurm's node list, else one node.
  std::string machines = args.machines;
  if (machines.empty() && !config->machines.empty())
    for (size_t i = 0; i < config->machines.size(); ++i)
      machines += fmt::format("{}{}:{}", i ? "," : "", config->machines[i], config->master_port);
  if (machines.empty()) {
    if (config->nnodes > 1)
      return fail_command(invalid_argument("{} nodes but no node addresses: give --machines (or run under Slurm)",
                                   config->nnodes));
    machines = fmt::format("{}:{}", config->master_addr, config->master_port);
  }
  if (auto list = parse_machine_list(machines, config->master_port);
      list.ok() && static_cast<int>(list->size()) != config->nnodes)
    return fail_command(invalid_argument(
        "nnodes={} (from {}) but the machine list {} names {} node(s): one address per node", config->nnodes,
        config->sources.count("nnodes") ? config->sources.at("nnodes") : "default", machines, list->size()));
  std::string master = fmt::format("{}:{}", config->master_addr, config->master_port);
  // The key, settled before anything starts, so that this node's agent and
  // processes hold the same one: a loopback node without --key or
  // --insecure makes (or reads) the user's default key and names it to them.
  if (std::getenv(comm::kKeyFileEnv) == nullptr && !comm::insecure_from_environment()) {
    auto list = parse_machine_list(machines, config->master_port);
    if (!list.ok()) return fail_command(list.status());
    const bool loopback = config->node_rank >= 0 && config->node_rank < static_cast<int>(list->size()) &&
                          is_loopback_address((*list)[config->node_rank].address);
    auto key = comm::agent_key(loopback);
    if (!key.ok()) return fail_command(key.status());
    if (*key) {
      auto path = comm::default_key_path();
      if (!path.ok()) return fail_command(path.status());
      ::setenv(comm::kKeyFileEnv, path->c_str(), 1);
    }
  }
  std::string logdir = config->logdir;
  if (!logdir.empty()) std::filesystem::create_directories(logdir);
  auto log_for = [&](int local) {
    return config->redirect && !logdir.empty() ? node_log_path(logdir, config->node_rank, local) : std::string();
  };

  bool is_job = args.target.size() > 5 && args.target.substr(args.target.size() - 5) == ".json";
  if (is_job && !args.program_args.empty())
    return fail_command(invalid_argument("'{}' after the job file {}: a job file takes no arguments, and the "
                                         "launcher's options go before it",
                                         fmt::join(args.program_args, " "), args.target));
  std::string job_text;  // read before any agent starts, so a bad path costs nothing
  if (is_job && config->node_rank == 0) {
    auto text = read_text_file(args.target);
    if (!text.ok()) return fail_command(text.status());
    job_text = std::move(*text);
  }

  // This node's agent: a device per process slot (a GPU each with --device
  // cuda, the CUDA_VISIBLE_DEVICES it inherits honoured by CUDA itself).
  std::string devices = fmt::format("{}:{}", config->device, config->nproc_per_node);
  auto start_agent = [&](bool again) {
    std::vector<std::string> argv = {"/proc/self/exe", "agent", "--machines", machines, "--rank",
                                     std::to_string(config->node_rank), "--ctrl-port",
                                     std::to_string(config->master_port), "--devices", devices};
    if (!args.http.empty()) argv.insert(argv.end(), {"--http", args.http});
    return spawn_process(argv, {}, logdir.empty() ? "" : node_log_path(logdir, config->node_rank, -1), again,
                         /*own_group=*/is_job && config->node_rank == 0);
  };
  // Node 0 of a job file: Ctrl-C or SIGTERM has the master stop the job at
  // a step boundary (a second time: at once; a third ends the launcher).
  // Elsewhere the signal is passed on to the agent and the processes (as
  // torchrun does), and the launcher ends when they have.
  const bool submits = is_job && config->node_rank == 0;
  if (submits) interrupts::install(3);
  else interrupts::install_forwarding(3);
  pid_t agent = start_agent(false);
  if (!submits) interrupts::forward_to(agent);
  int code = 0;
  if (is_job) {
    // A job file: node 0 submits it and prints the master's progress.
    if (config->node_rank == 0) {
      const std::string agent_log = logdir.empty() ? "" : node_log_path(logdir, config->node_rank, -1);
      // Our agent (in a process group of its own) goes with the launcher
      // when no job comes of it.
      auto give_up = [&](const Status& why) {
        if (waitpid(agent, nullptr, WNOHANG) == 0) {  // still ours and running (wait_for_agent may have reaped it)
          kill(agent, SIGTERM);
          (void)wait_process(agent);
        }
        return why.code() == Code::kAborted ? (fail_command(why), interrupts::exit_code()) : fail_command(why);
      };
      if (Status up = wait_for_agent(master, agent, agent_log, 120); !up.ok()) return give_up(up);
      auto client = Client::connect(master, 120);
      if (!client.ok()) return give_up(client.status());
      SubmitOptions options;
      options.on_line = [](const std::string& line) { fmt::print("{}\n", line); };
      options.max_restarts = args.max_restarts;
      options.interrupts = &interrupts::counter();
      auto result = (*client)->submit_text(job_text, args.target, options);
      // A job that never ran (the master refused it, was another cluster's,
      // or the cluster never formed) leaves our agent waiting for its peers:
      // it goes now, without a shutdown the unformed cluster would not answer.
      if (!result.ok()) return give_up(result.status());
      if (!result->status.ok()) code = fail_command(result->status);
      else if (interrupts::count() > 0) code = interrupts::exit_code();
      (void)(*client)->shutdown();
    }
  } else {
    // A program (built on the job API): one process per slot, told its place
    // by the usual variables; the program submits its job to the master.
    std::vector<pid_t> processes;
    for (int local = 0; local < config->nproc_per_node && interrupts::count() == 0; ++local) {
      auto environment = launch_environment(*config, local);
      std::vector<std::string> argv{args.target};
      argv.insert(argv.end(), args.program_args.begin(), args.program_args.end());
      processes.push_back(spawn_process(argv, environment, log_for(local)));
      interrupts::forward_to(processes.back());
    }
    for (size_t local = 0; local < processes.size(); ++local) {
      int status = 0;
      const int c = wait_child(processes[local], &status);
      if (c != 0)  // as torchrun's failure summary: which process, and how it ended
        spdlog::error("launch: {} (RANK {}, LOCAL_RANK {}) {}", args.target,
                      config->node_rank * config->nproc_per_node + static_cast<int>(local), local,
                      WIFSIGNALED(status) ? fmt::format("ended by signal {}", WTERMSIG(status))
                                          : fmt::format("exited with code {}", c));
      if (code == 0) code = c;
    }
    if (config->node_rank == 0 && interrupts::count() == 0) {  // an interrupt reached the agent already
      auto client = Client::connect(master, 10);
      if (client.ok()) (void)(*client)->shutdown();
    }
  }
  // A non-master agent that dies is started again with the same rank: the
  // master takes it back (and resumes a job submitted with restarts). The
  // master's own agent holds the cluster: when it goes, so does the cluster.
  int agent_code = wait_child(agent);
  for (int left = args.max_restarts; agent_code != 0 && config->node_rank != 0 && left > 0 && interrupts::count() == 0;
       --left) {
    spdlog::warn("launch: the agent of node {} ended with {}; starting it again ({} restart(s) left)",
                 config->node_rank, agent_code, left - 1);
    agent = start_agent(true);
    interrupts::forward_to(agent);
    agent_code = wait_child(agent);
  }
  // Stopped by a signal, the launcher says so, whatever its children did.
  if (code == 0 && agent_code == 0 && interrupts::count() > 0) return interrupts::exit_code();
  return code != 0 ? code : agent_code;
}

}  // namespace rill
