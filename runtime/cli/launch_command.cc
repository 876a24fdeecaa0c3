// `rill launch`: the seed launcher (torchrun's flags and environment
// variables). Starts this node's agent; given a job file, node 0 submits
// it; given a program, starts nproc_per_node copies of it.
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
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "comm/default_key.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/client.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/interrupts.h"
#include "runtime/cli/key_flags.h"
#include "runtime/cluster/env.h"

namespace rill {
namespace {

// `rill launch`: the seed launcher's flags (and the usual environment
// variables). Starts this node's agent; given a job file, node 0 submits it;
// given a program, starts nproc_per_node copies with WORLD_SIZE, RANK,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and RILL_*) set.
struct LaunchArgs {
  LaunchFlags flags;
  std::string machines;  // every node's address; default: Slurm's list, or one node
  std::string target;    // a job file (.json) or a program
  std::vector<std::string> program_args;
  // This node's agent is started again when it dies, up to this many times;
  // node 0 submits its job file with as many restarts.
  int max_restarts = 0;
  std::string http;  // this node's agent's --http (the master's serves; empty: its default)
};

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

int launch(const LaunchArgs& args) {
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
    auto text = read_job_text(args.target);
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

class LaunchCommand : public cli::Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("launch", "Start this node's agent and a job file or a program (torchrun-style)");
    app_->add_option("--nnodes", nnodes_, "Nodes in the run");
    app_->add_option("--node_rank", node_rank_, "This node's rank (0 is the master)");
    app_->add_option("--nproc_per_node", nproc_per_node_, "Processes (devices) on this node");
    app_->add_option("--device", device_,
                     "Each slot's device: cpu, or cuda (a GPU each; a program's process i sees only its GPU, "
                     "the i-th of CUDA_VISIBLE_DEVICES where that is set)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    app_->add_option("--master_addr", master_addr_, "The master's address");
    app_->add_option("--master_port", master_port_, "The master's control port (every node's)");
    app_->add_option("--machines", args_.machines, "Every node's address, addr[:port],...");
    app_->add_option("--logdir", logdir_, "Folder for the processes' logs");
    app_->add_flag("--redirect_stdout_and_stderr", redirect_, "Write each process's output to a file in --logdir");
    app_->add_option("--max_restarts,--max-restarts", args_.max_restarts,
                     "Start this node's agent again when it dies; node 0 resumes the job from its newest checkpoint, "
                     "up to this many times")
        ->check(CLI::NonNegativeNumber);
    app_->add_option("--http", args_.http,
                     fmt::format("Where node 0's agent serves its dashboard, /metrics and /api, ADDRESS:PORT or off "
                                 "(default {})",
                                 kDefaultHttp));
    app_->add_option("target", args_.target,
                     "A job file (.json), or a program: what follows it is the program's arguments, passed unchanged")
        ->required();
    key_.add_key(app_);
    key_.add_insecure(app_, "Connect without a key (to agents started with --insecure)");
  }

  // `rill launch [FLAGS] TARGET [ARGS...]`: what follows the target is the
  // program's, dashes and all (torchrun's way), so the command line is
  // parsed only up to it; `--` before the target is allowed (and kept, so
  // a target starting with a dash is still the target).
  void before_parse(std::vector<char*>& words) override {
    if (words.size() <= 2 || std::string_view(words[1]) != "launch") return;
    for (size_t i = 2; i < words.size(); ++i) {
      const std::string_view a = words[i];
      if (a == "--") {
        ++i;  // the target
      } else if (a.size() > 1 && a[0] == '-') {
        // An option's value is the next word; a flag (expects none) has none.
        const CLI::Option* option = app_->get_option_no_throw(std::string(a));
        if (option != nullptr && a.find('=') == std::string_view::npos && option->get_items_expected_min() > 0) ++i;
        continue;
      }
      if (i < words.size()) {
        args_.program_args.assign(words.begin() + static_cast<std::ptrdiff_t>(i) + 1, words.end());
        words.resize(i + 1);
      }
      return;
    }
  }

  int act() override {
    if (int code = key_.apply(/*client_key_does=*/false); code != 0) return code;
    // Flags the user gave win over the environment; absent ones fall back to it.
    auto given = [&](const char* name) { return app_->count(name) > 0; };
    if (given("--nnodes")) args_.flags.nnodes = nnodes_;
    if (given("--node_rank")) args_.flags.node_rank = node_rank_;
    if (given("--nproc_per_node")) args_.flags.nproc_per_node = nproc_per_node_;
    if (given("--device")) args_.flags.device = device_;
    if (given("--master_addr")) args_.flags.master_addr = master_addr_;
    if (given("--master_port")) args_.flags.master_port = master_port_;
    if (given("--logdir")) args_.flags.logdir = logdir_;
    if (redirect_) args_.flags.redirect = true;
    return launch(args_);
  }

 private:
  LaunchArgs args_;
  int nnodes_ = 1, node_rank_ = 0, nproc_per_node_ = 1, master_port_ = kDefaultCtrlPort;
  std::string device_ = "cpu", master_addr_, logdir_;
  bool redirect_ = false;
  cli::KeyFlags key_;
};

}  // namespace

std::unique_ptr<cli::Command> cli::launch_command() { return std::make_unique<LaunchCommand>(); }

}  // namespace rill
