// The `rill` command: run, plan and check jobs on this machine.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/safe_files.h"
#include "comm/client_key.h"
#include "comm/cluster_key.h"
#include "comm/default_key.h"
#include "compiler/compiler.h"
#include "compiler/pserver.h"
#include "graph/check_util.h"
#include "graph/job_check.h"
#include "graph/job_file.h"
#include "runtime/cli/check_command.h"
#include "runtime/cli/cluster_commands.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/interrupts.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/cli/generate_command.h"
#include "runtime/cli/plan_stats.h"
#include "runtime/cli/plot_script.h"
#include "runtime/cluster/client.h"

namespace {

using rill::Status;
using rill::StatusOr;

// Loads a job file, applies --set overrides, then checks; errors name the file.
StatusOr<rill::graph::Job> load(const std::string& path, const std::vector<std::string>& overrides) {
  return rill::graph::load_job_file(path, overrides);
}

}  // namespace

int main(int argc, char** argv) {
  // A count or a time in seconds: a number > 0 (CLI11's own check prints its range's float bounds).
  const CLI::Validator positive(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        return end != text.c_str() && *end == '\0' && value > 0 && std::isfinite(value)
                   ? ""
                   : "must be a finite number > 0, got " + text;
      },
      "> 0", "positive");
  CLI::App app{"Rill: a decentralized, actor-based training engine"};
  app.require_subcommand(1);

  std::string job_path, devices, result_path, trace_path, dot_path;
  std::vector<std::string> overrides;
  int64_t steps = 0;
  int nodes = 1;
  double stall_timeout = 60.0;
  bool json = false;
  bool stats = false;
  int plan_node = -1;

  int ctrl_port = rill::kDefaultCtrlPort;
  std::string logdir, machines, master;
  double join_timeout = 60.0;
  int rank = 0;
  bool follow = false;
  std::string resume;
  int max_restarts = 0;
  int min_nodes = 0;

  CLI::App* run = app.add_subcommand("run", "Compile and run a job on this machine (--nodes N: on N local agents)");
  run->add_option("job", job_path, "Job description file (JSON)")->required();
  run->add_option("--devices", devices, "Devices, e.g. cpu:2 (default: the job's train.devices)");
  run->add_option("--steps", steps, "Run this many steps instead of the job's")->check(positive);
  run->add_option("--result", result_path, "Write the result as JSON to this file");
  run->add_option("--set", overrides, "Override a job field, e.g. --set train.steps=100");
  run->add_option("--trace", trace_path, "Write a Chrome-trace timeline of every act (with --nodes: one process per node)");
  run->add_option("--stall-timeout", stall_timeout, "Stop and report when no actor acts for this many seconds")
      ->check(positive);
  run->add_option("--resume", resume, "Resume from a checkpoint folder, or 'latest' under the job's checkpoint.dir");
  run->add_option("--nodes", nodes, "Start this many agents on 127.0.0.1..N and run the job on them")
      ->check(CLI::Range(1, 254));
  run->add_option("--ctrl-port", ctrl_port, "Control port of the local agents (data port: +1)")
      ->check(CLI::Range(1, rill::kMaxCtrlPort));
  run->add_option("--logdir", logdir, "Where the non-master agents write their logs");
  std::string run_http;
  run->add_option("--http", run_http,
                  fmt::format("With --nodes: where the master agent serves its dashboard, /metrics and /api, "
                              "ADDRESS:PORT or off (default {})",
                              rill::kDefaultHttp));
  std::string metrics_path;
  run->add_option("--metrics", metrics_path,
                  "Append the training's metrics to this file as JSON lines (one process; with --nodes the master writes "
                  "job-1.jsonl in --logdir instead)");
  run->add_option("--max-restarts", max_restarts,
                  "With --nodes: an agent that dies is started again and the job resumes from its newest checkpoint, "
                  "up to this many times")
      ->check(CLI::NonNegativeNumber);
  const std::string min_nodes_help =
      "Data parallelism: when a node is lost, the job goes on from the other nodes' memory at the step every one "
      "holds, on the nodes that remain, while at least this many do (default: every node; a lost node ends the "
      "attempt)";
  run->add_option("--min-nodes", min_nodes, min_nodes_help)->check(CLI::PositiveNumber);

  CLI::App* agent = app.add_subcommand("agent", "Run this node's agent (node 0 is the master)");
  agent->add_option("--machines", machines, "Machine list: addr[:port],... or a file with one per line")->required();
  agent->add_option("--rank", rank, "This node's index in the machine list")->required();
  agent->add_option("--ctrl-port", ctrl_port, "Control port where an entry gives none (data port: +1)")
      ->check(CLI::Range(1, rill::kMaxCtrlPort));
  // Its own variable: a default here must not become every subcommand's
  // --devices (rill run would then ignore the job's train.devices).
  std::string agent_devices = "cpu:1";
  agent->add_option("--devices", agent_devices, "This node's devices, e.g. cpu:2")->capture_default_str();
  agent->add_option("--join-timeout", join_timeout, "Seconds for the cluster to form")->check(positive);
  agent->add_option("--stall-timeout", stall_timeout, "Stop a job when no actor acts for this many seconds")
      ->check(positive);
  rill::AgentOptions agent_options;
  agent->add_option("--heartbeat", agent_options.heartbeat_s, "Seconds between heartbeats")->capture_default_str();
  agent->add_option("--dead-after", agent_options.dead_after_s,
                    "The master declares a node lost after this many seconds without a heartbeat")
      ->capture_default_str();
  std::string agent_log;
  agent->add_option("--log", agent_log, "Write this agent's output to this file instead of the terminal");
  agent->add_option("--max-message-bytes", agent_options.max_message_bytes,
                    "The largest message taken on the control and data ports (a larger one drops its connection)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{4} << 20, size_t{1} << 40));  // collectives move 1 MiB pieces
  agent->add_option("--http", agent_options.http,
                    fmt::format("The master's metrics and status over HTTP: ADDRESS:PORT, or off (default {})",
                                rill::kDefaultHttp));
  agent->add_option("--metrics-dir", agent_options.metrics_dir,
                    "The master writes each job's metrics here as job-ID.jsonl (JSON lines)");
  agent->add_option("--control-send-hwm", agent_options.control_send_hwm,
                    "ZeroMQ's send high-water mark on the control sockets (tests)")
      ->group("");
  agent->add_option("--checkpoint-write-delay", agent_options.checkpoint_write_delay_s,
                    "Make every checkpoint write this many seconds slower (tests: a slow disk)")
      ->group("");
  std::string control_fault;
  agent->add_option("--control-fault", control_fault,
                    "Inject a fault into this agent's control messages (tests): KIND:MESSAGE[:SECONDS]")
      ->group("");

  CLI::App* submit = app.add_subcommand("submit", "Submit a job to a cluster's master agent");
  submit->add_option("job", job_path, "Job description file (JSON)")->required();
  submit->add_option("--master", master, "The master's address[:port]")->required();
  submit->add_option("--result", result_path, "Write the result as JSON to this file");
  submit->add_option("--trace", trace_path,
                     "Write a Chrome-trace timeline of every node's acts (one process per node)");
  submit->add_flag("--follow", follow, "Print the master's progress lines");
  submit->add_option("--devices", devices, "Devices per node (default: the agents')");
  submit->add_option("--steps", steps, "Run this many steps instead of the job's")->check(positive);
  submit->add_option("--set", overrides, "Override a job field");
  submit->add_option("--resume", resume, "Resume from a checkpoint folder, or 'latest'");
  submit->add_option("--max-restarts", max_restarts,
                     "When a node is lost, run the job again from its newest checkpoint once the node's agent is back, "
                     "up to this many times")
      ->check(CLI::NonNegativeNumber);
  submit->add_option("--min-nodes", min_nodes, min_nodes_help)->check(CLI::PositiveNumber);

  CLI::App* status = app.add_subcommand("status", "Show a cluster: nodes, devices, state, jobs");
  status->add_option("--master", master, "The master's address[:port]")->required();
  int64_t status_job = -1;
  bool status_comm = false;
  status->add_option("--job", status_job, "With --comm: the running job's id (refused if another job runs)");
  status->add_flag("--comm", status_comm,
                   "The running job's flight records: on every node, each collective's call in flight and the node "
                   "it waits for, the last one completed, the actor messages on each link, the last events");

  CLI::App* stop = app.add_subcommand(
      "stop", "Stop a cluster's running job at the next step boundary, with its last checkpoint there");
  stop->add_option("--master", master, "The master's address[:port]")->required();
  int64_t stop_job = 0;
  bool stop_now = false;
  stop->add_option("--job", stop_job, "The job's id (default: the running one)");
  stop->add_flag("--now", stop_now, "Stop it at once, not at a step boundary");
  CLI::App* shutdown = app.add_subcommand("shutdown", "Stop every agent of a cluster (a running job ends at once)");
  shutdown->add_option("--master", master, "The master's address[:port]")->required();

  CLI::App* plan = app.add_subcommand("plan", "Compile a job and print its physical plan");
  plan->add_option("job", job_path, "Job description file (JSON)")->required();
  plan->add_option("--devices", devices, "Devices per node, e.g. cpu:2");
  plan->add_option("--nodes", nodes, "Number of nodes")->check(CLI::Range(1, 4096));
  plan->add_option("--set", overrides, "Override a job field");
  plan->add_flag("--json", json,
                 "Print the plan as JSON (the default output; with --dot or --stats, printed besides them)");
  plan->add_option("--node", plan_node,
                   "Compile only this node's plan, as its agent does (ids are the whole plan's)")
      ->check(CLI::Range(0, 4095));
  plan->add_flag("--stats", stats,
                 "Print only the compile time, the plan's size (tasks, regsts, bytes), its communicators, how GPU "
                 "regsts change memory zones (copies, sends through host memory) and the time its memory plan takes");
  plan->add_option("--dot", dot_path, "Write the plan as Graphviz DOT to this file");

  std::string plot_output = "loss.png";
  CLI::App* plot_cmd = app.add_subcommand("plot", "Draw a run's loss curve to a PNG (Python with matplotlib)");
  plot_cmd->add_option("input", job_path, "A result JSON (--result) or a metrics file of JSON lines")->required();
  plot_cmd->add_option("-o,--output", plot_output, "The PNG to write")->capture_default_str();

  rill::GenerateArgs generate_args;
  CLI::App* generate = app.add_subcommand("generate", "Sample text from a trained byte-level model in a checkpoint");
  generate->add_option("job", generate_args.job_path, "Job description file (JSON) with a generate section")->required();
  generate->add_option("--checkpoint", generate_args.checkpoint,
                       "A checkpoint's step directory, or its root (the latest step)")
      ->required();
  generate->add_option("--set", generate_args.overrides, "Override a job field, as rill run takes it");
  generate->add_option("--prompt", generate_args.prompt, "The text to go on from (default: the job's)");
  generate->add_option("--tokens", generate_args.tokens, "Bytes to sample (default: the job's)");
  generate->add_option("--temperature", generate_args.temperature, "0: the most likely byte each time");
  generate->add_option("--top-k", generate_args.top_k, "Sample among the k most likely bytes (0: all)");
  generate->add_option("--seed", generate_args.seed, "The draws' seed");

  CLI::App* check = app.add_subcommand("check", "Validate a job description file");
  check->add_option("job", job_path, "Job description file (JSON)")->required();
  check->add_option("--set", overrides, "Override a job field, as rill run takes it");
  check->add_option("--nodes", nodes, "Check the plan for this many nodes (placements on other nodes, pservers)")
      ->check(CLI::Range(1, 4096));
  check->add_option("--devices", devices, "Devices per node, e.g. cpu:2");

  rill::LaunchArgs launch_args;
  int nnodes = 1, node_rank = 0, nproc_per_node = 1, master_port = rill::kDefaultCtrlPort;
  std::string master_addr, launch_logdir;
  bool redirect = false;
  CLI::App* launch = app.add_subcommand("launch", "Start this node's agent and a job file or a program (torchrun-style)");
  launch->add_option("--nnodes", nnodes, "Nodes in the run");
  launch->add_option("--node_rank", node_rank, "This node's rank (0 is the master)");
  launch->add_option("--nproc_per_node", nproc_per_node, "Processes (devices) on this node");
  std::string launch_device = "cpu";
  launch->add_option("--device", launch_device,
                     "Each slot's device: cpu, or cuda (a GPU each; a program's process i sees only its GPU, "
                     "the i-th of CUDA_VISIBLE_DEVICES where that is set)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  launch->add_option("--master_addr", master_addr, "The master's address");
  launch->add_option("--master_port", master_port, "The master's control port (every node's)");
  launch->add_option("--machines", launch_args.machines, "Every node's address, addr[:port],...");
  launch->add_option("--logdir", launch_logdir, "Folder for the processes' logs");
  launch->add_flag("--redirect_stdout_and_stderr", redirect, "Write each process's output to a file in --logdir");
  launch->add_option("--max_restarts,--max-restarts", launch_args.max_restarts,
                     "Start this node's agent again when it dies; node 0 resumes the job from its newest checkpoint, "
                     "up to this many times")
      ->check(CLI::NonNegativeNumber);
  launch->add_option("--http", launch_args.http,
                     fmt::format("Where node 0's agent serves its dashboard, /metrics and /api, ADDRESS:PORT or off "
                                 "(default {})",
                                 rill::kDefaultHttp));
  launch->add_option("target", launch_args.target,
                     "A job file (.json), or a program: what follows it is the program's arguments, passed unchanged")
      ->required();

  // The cluster key, on every command that talks to agents; it travels to
  // what they start (agents, launched processes) in the environment.
  std::string key_file;
  bool insecure = false;
  CLI::App* token = app.add_subcommand(
      "token", "Print the bearer token of a keyed cluster's HTTP endpoint (dashboard, /metrics, /api)");
  std::string token_http = rill::kDefaultHttp, token_master;
  token->add_option("--http", token_http, "Also print the dashboard's address with it: the master's ADDRESS:PORT")
      ->capture_default_str();
  token->add_option("--master", token_master,
                    "Ask this master (address[:port]) where it serves, instead of assuming --http");
  for (CLI::App* command : {agent, submit, status, stop, shutdown, launch, token})
    command->add_option("--key", key_file,
                        fmt::format("The cluster's key file (`rill keygen` writes one; default: ${})",
                                    rill::comm::kKeyFileEnv));
  agent->add_flag("--insecure", insecure,
                  "Run without a cluster key (none is made or read): anyone who reaches its ports can run jobs");
  for (CLI::App* command : {submit, status, stop, shutdown, launch})
    command->add_flag("--insecure", insecure, "Connect without a key (to agents started with --insecure)");
  agent->add_option("--data-root", agent_options.data_roots,
                    "A folder submitted jobs may read datasets from (repeatable; default: the working folder, "
                    "/usr/share, /tmp)");
  agent->add_option("--checkpoint-root", agent_options.checkpoint_roots,
                    "A folder submitted jobs may write checkpoints to and resume from (repeatable; default: the "
                    "working folder, /tmp)");
  run->add_flag("--insecure", insecure, "With --nodes: no key for the local cluster (connections unencrypted)");
  CLI::App* keygen = app.add_subcommand("keygen", "Write a new cluster key file, and its client key (mode 0600)");
  std::string keygen_path, keygen_client;
  bool keygen_force = false;
  bool keygen_default = false;
  keygen->add_option("file", keygen_path, "Where to write a new cluster key (for the agents)");
  keygen->add_flag("--default", keygen_default,
                   "Write it where agents and clients look when no key is named ($XDG_CONFIG_HOME/rill/cluster.key, "
                   "else ~/.config/rill/cluster.key), outside every folder jobs may read by default");
  keygen->add_option("--client", keygen_client,
                     "Also write its client key here: it submits, watches and stops jobs and cannot act as a node "
                     "(without FILE: the client key of the cluster key --key names)");
  keygen->add_option("--key", key_file, "With --client alone: the existing cluster key to make the client key of");
  keygen->add_flag("--force", keygen_force, "Replace existing files");

  // An unknown command is named as one (CLI11 would say a command is required).
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands({})) names.push_back(command->get_name());
  if (argc > 1 && argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end()) {
    return rill::fail_command(rill::invalid_argument("unknown command '{}'{}; the commands: {}", argv[1],
                                                     rill::graph::check::did_you_mean(argv[1], names),
                                                     fmt::join(names, ", ")));
  }
  // `rill launch [FLAGS] TARGET [ARGS...]`: what follows the target is the
  // program's, dashes and all (torchrun's way), so the command line is
  // parsed only up to it; `--` before the target is allowed (and kept, so
  // a target starting with a dash is still the target).
  std::vector<char*> args(argv, argv + argc);
  if (args.size() > 2 && std::string_view(args[1]) == "launch")
    for (size_t i = 2; i < args.size(); ++i) {
      const std::string_view a = args[i];
      if (a == "--") {
        ++i;  // the target
      } else if (a.size() > 1 && a[0] == '-') {
        // An option's value is the next word; a flag (expects none) has none.
        const CLI::Option* option = launch->get_option_no_throw(std::string(a));
        if (option != nullptr && a.find('=') == std::string_view::npos && option->get_items_expected_min() > 0) ++i;
        continue;
      }
      if (i < args.size()) {
        launch_args.program_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
        args.resize(i + 1);
      }
      break;
    }
  argc = static_cast<int>(args.size());
  argv = args.data();
  CLI11_PARSE(app, argc, argv);

  // No key, said once for everything this command starts (comm/default_key.h).
  if (insecure && !run->parsed()) ::setenv(rill::comm::kInsecureEnv, "1", 1);
  if (!key_file.empty()) {
    // Read here, so that a bad file is named as the flag's; then everything
    // this command starts reads it from the environment. A client key does
    // for commands that talk to a master; agents need the cluster key.
    std::error_code ec;
    const std::string absolute = std::filesystem::absolute(key_file, ec).string();
    ::setenv(rill::comm::kKeyFileEnv, absolute.c_str(), 1);
    const bool client_key = rill::comm::is_client_key_file(key_file) && !agent->parsed() && !launch->parsed() &&
                            !keygen->parsed();
    if (auto key = client_key ? rill::comm::client_key_from_environment().status()
                              : rill::comm::read_key_file(key_file).status();
        !key.ok())
      return rill::fail_command(key.with_context("--key"));
  }
  if (keygen->parsed()) {
    if (keygen_path.empty() && keygen_client.empty() && !keygen_default)
      return rill::fail_command(rill::invalid_argument(
          "rill keygen FILE writes a new cluster key; --client CLIENT_FILE also (or, with --key, only) its client key"));
    if (keygen_default && !keygen_path.empty())
      return rill::fail_command(rill::invalid_argument("rill keygen: give a FILE or --default, not both"));
    if (keygen_default) {
      auto path = rill::comm::prepare_default_key_folder();
      if (!path.ok()) return rill::fail_command(path.status());
      keygen_path = *path;
    }
    rill::comm::ClusterKey key;
    if (!keygen_path.empty()) {
      auto fresh = rill::comm::generate_cluster_key();
      if (!fresh.ok()) return rill::fail_command(fresh.status());
      key = *fresh;
      if (Status written = rill::comm::write_key_file(keygen_path, key, keygen_force); !written.ok())
        return rill::fail_command(written);
      if (keygen_default)
        fmt::print("wrote the cluster key {}: agents and clients of this user use it when no key is named; put the "
                   "same file at the same place on every machine\n",
                   keygen_path);
      else
        fmt::print("wrote the cluster key {}: give it to every agent (--key {} or {}={}); keep it outside the "
                   "folders jobs may read\n",
                   keygen_path, keygen_path, rill::comm::kKeyFileEnv, keygen_path);
    } else {
      auto existing = rill::comm::key_from_environment();
      if (!existing.ok()) return rill::fail_command(existing.status());
      if (!*existing)
        return rill::fail_command(rill::invalid_argument(
            "--client alone makes the client key of an existing cluster key: name it with --key FILE"));
      key = **existing;
    }
    if (!keygen_client.empty()) {
      if (Status written =
              rill::comm::write_client_key_file(keygen_client, rill::comm::client_key_of(key), keygen_force);
          !written.ok())
        return rill::fail_command(written);
      fmt::print("wrote its client key {}: give it to those who submit, watch and stop jobs (it cannot act as a "
                 "node)\n",
                 keygen_client);
    }
    return 0;
  }

  if (token->parsed()) {
    auto key = rill::comm::client_key_from_environment();
    if (!key.ok()) return rill::fail_command(key.status());
    if (!*key)
      return rill::fail_command(rill::invalid_argument("no cluster key: give --key FILE or {}", rill::comm::kKeyFileEnv));
    const std::string value = (*key)->http_token;
    if (!token_master.empty()) {  // where it really serves, if it does
      auto client = rill::Client::connect(token_master, 5.0, /*running=*/true);
      auto status = client.ok() ? (*client)->status() : rill::StatusOr<std::string>(client.status());
      if (!status.ok()) return rill::fail_command(status.status());
      auto j = nlohmann::json::parse(*status, nullptr, false);
      if (j.is_discarded() || !j.contains("http") || !j["http"].is_string())
        return rill::fail_command(rill::Status(rill::Code::kUnavailable,
                                               fmt::format("the master {} serves no HTTP endpoint (--http off, or its "
                                                           "port was taken)",
                                                           token_master)));
      token_http = j["http"].get<std::string>();
    }
    fmt::print("{}\nhttp://{}/?token={}\n", value, token_http, value);
    return 0;
  }

  if (launch->parsed()) {
    // Flags the user gave win over the environment; absent ones fall back to it.
    auto given = [&](const char* name) { return launch->count(name) > 0; };
    if (given("--nnodes")) launch_args.flags.nnodes = nnodes;
    if (given("--node_rank")) launch_args.flags.node_rank = node_rank;
    if (given("--nproc_per_node")) launch_args.flags.nproc_per_node = nproc_per_node;
    if (given("--device")) launch_args.flags.device = launch_device;
    if (given("--master_addr")) launch_args.flags.master_addr = master_addr;
    if (given("--master_port")) launch_args.flags.master_port = master_port;
    if (given("--logdir")) launch_args.flags.logdir = launch_logdir;
    if (redirect) launch_args.flags.redirect = true;
    return rill::launch_command(launch_args);
  }

  if (agent->parsed() && !agent_log.empty()) {
    auto log = rill::open_for_write(agent_log, true, "the log file");
    if (!log.ok()) return rill::fail_command(log.status());
    std::fflush(stdout);
    dup2(*log, STDOUT_FILENO);
    dup2(*log, STDERR_FILENO);
    ::close(*log);
  }
  if (agent->parsed()) {
    agent_options.rank = rank;
    agent_options.devices = agent_devices;
    agent_options.join_timeout_s = join_timeout;
    agent_options.stall_timeout_s = stall_timeout;
    agent_options.insecure = rill::comm::insecure_from_environment();
    auto fault = rill::parse_control_fault(control_fault);
    if (!fault.ok()) return rill::fail_command(fault.status());
    agent_options.fault = *fault;
    return rill::agent_command(machines, ctrl_port, agent_options);
  }
  if (submit->parsed()) {
    rill::SubmitOptions options;
    options.devices = devices;
    options.steps = steps;
    options.overrides = overrides;
    options.resume = resume;
    options.max_restarts = max_restarts;
    options.min_nodes = min_nodes;
    for (const auto& [path, what] : {std::pair{result_path, "the result file"}, std::pair{trace_path, "the trace file"}})
      if (!path.empty())
        if (Status writable = rill::check_can_write(path, what); !writable.ok()) return rill::fail_command(writable);
    return rill::submit_command(job_path, master, result_path, trace_path, follow, options);
  }
  if (run->parsed() && nodes > 1 && !metrics_path.empty())
    return rill::fail_command(rill::invalid_argument(
        "--metrics names one process's file; with --nodes the master writes job-1.jsonl in --logdir"));
  if (run->parsed() && nodes == 1 && min_nodes > 0)
    return rill::fail_command(rill::invalid_argument("--min-nodes keeps a cluster going without a lost node: it needs "
                                                     "--nodes N (or rill agent and rill submit)"));
  if (run->parsed() && nodes == 1 && max_restarts > 0)
    return rill::fail_command(rill::invalid_argument(
        "--max-restarts restarts lost nodes: it needs a cluster (--nodes N, or rill agent and rill submit)"));
  // Flags of the local cluster do nothing in one process: refused, not ignored.
  for (const char* flag : {"--logdir", "--ctrl-port"})
    if (run->parsed() && nodes == 1 && run->count(flag) > 0)
      return rill::fail_command(rill::invalid_argument(
          "{} places the local cluster's agents: it needs --nodes N (one process starts none)", flag));
  if (run->parsed() && nodes == 1 && insecure)
    return rill::fail_command(rill::invalid_argument(
        "--insecure leaves a local cluster without its key: it needs --nodes N (one process has no connections)"));
  if (status->parsed()) return rill::status_command(master, status_comm, status_job);
  if (stop->parsed()) return rill::stop_command(master, stop_job, stop_now);
  if (shutdown->parsed()) return rill::shutdown_command(master);
  if (generate->parsed()) return rill::generate_command(generate_args);
  if (plot_cmd->parsed()) {
    // Debian's python3 (where python3-matplotlib goes) before whatever is first on PATH.
    const char* python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    execlp(python, python, "-c", rill::graph::kPlotScript, job_path.c_str(), plot_output.c_str(), nullptr);
    return rill::fail_command(rill::invalid_argument("rill plot needs Python 3 ({}): {}", python, std::strerror(errno)));
  }
  if (run->parsed() && !run_http.empty() && nodes <= 1)
    return rill::fail_command(rill::invalid_argument(
        "--http places the local cluster's dashboard: it needs --nodes N (one process serves none)"));
  if (run->parsed() && nodes > 1) {
    for (const auto& [path, what] : {std::pair{result_path, "the result file"}, std::pair{trace_path, "the trace file"}})
      if (!path.empty())
        if (Status writable = rill::check_can_write(path, what); !writable.ok()) return rill::fail_command(writable);
    rill::ClusterRunArgs args;
    args.job_path = job_path;
    args.nodes = nodes;
    args.devices = devices;
    args.ctrl_port = ctrl_port;
    args.steps = steps;
    args.overrides = overrides;
    args.resume = resume;
    args.result_path = result_path;
    args.trace_path = trace_path;
    args.logdir = logdir;
    args.stall_timeout_s = stall_timeout;
    args.max_restarts = max_restarts;
    args.min_nodes = min_nodes;
    args.keyed = !insecure;
    args.http = run_http;
    return rill::run_local_cluster(args);
  }

  if (check->parsed())
    return rill::check_command({job_path, overrides, devices, nodes, check->count("--nodes") > 0});

  auto job = load(job_path, overrides);
  if (!job.ok()) return rill::fail_command(job.status());

  if (plan->parsed()) {
    auto cluster = rill::compiler::parse_devices(devices.empty() ? job->train.devices : devices, nodes);
    if (!cluster.ok()) return rill::fail_command(cluster.status());
    if (job->pserver_mode()) {
      // Fluid's FLAGS_rpc_* as a run reads them; pservers by node number
      // (there is no machine list here).
      if (Status resolved = rill::resolve_distributed(&*job, {}); !resolved.ok())
        return rill::fail_command(resolved);
      // The layout on stderr, so that the plan on stdout stays JSON.
      auto layout = rill::compiler::pserver_layout(*job, *cluster);
      if (!layout.ok()) return rill::fail_command(layout.status());
      fmt::print(stderr, "{}", rill::compiler::describe_pserver_layout(*layout, *job));
    }
    const auto start = std::chrono::steady_clock::now();
    rill::compiler::CompileOptions plan_options;
    plan_options.node = plan_node;
    auto bytes = rill::compiler::compile(*job, *cluster, plan_options);
    if (!bytes.ok()) return rill::fail_command(bytes.status());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto verified = rill::compiler::verify_plan(*bytes);
    if (!verified.ok()) return rill::fail_command(verified.status());
    if (stats) rill::print_plan_stats(**verified, bytes->size(), seconds);
    if (!dot_path.empty()) {
      Status written = rill::write_text_file(dot_path, rill::compiler::plan_dot(**verified));
      if (!written.ok()) return rill::fail_command(written);
      if (!json)  // with --json, the output is the JSON alone
        fmt::print("plan drawn as Graphviz DOT in {} (render: dot -Tsvg {} -o plan.svg)\n", dot_path, dot_path);
    }
    if (json || (dot_path.empty() && !stats)) fmt::print("{}\n", rill::compiler::plan_json(**verified));
    return 0;
  }

  // Files written at the run's end, found unwritable before it starts.
  for (const auto& [path, what] : {std::pair{result_path, "the result file"}, std::pair{trace_path, "the trace file"},
                                   std::pair{metrics_path, "the metrics file"}})
    if (!path.empty())
      if (Status writable = rill::check_can_write(path, what); !writable.ok()) return rill::fail_command(writable);
  rill::JobRunOptions options;
  options.devices = devices;
  options.steps = steps;
  options.stall_timeout_s = stall_timeout;
  options.trace_file = trace_path;
  options.resume = resume;
  options.metrics_file = metrics_path;
  // Ctrl-C or SIGTERM: the job stops at a step boundary and says what it
  // kept; a second one stops the process at once.
  rill::interrupts::install(2);
  options.stop = &rill::interrupts::stop_requested();
  rill::JobResult result = rill::run_job(*job, options);
  if (!result_path.empty()) {
    Status written = rill::write_text_file(result_path, rill::result_json(result));
    if (!written.ok()) return rill::fail_command(written);
  }
  if (!result.status.ok()) return rill::fail_command(result.status);
  return result.interrupted ? rill::interrupts::exit_code() : 0;
}
