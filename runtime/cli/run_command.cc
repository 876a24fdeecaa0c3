// `rill run`: a job compiled and run in this process, on its devices; with
// --nodes N, on a cluster of N local agents this command starts, keys,
// watches and shuts down (runtime/cli/local_cluster.h).
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "graph/job_file.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/interrupts.h"
#include "runtime/cli/local_cluster.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/cluster/job_runner.h"

namespace rill::cli {
namespace {

class RunCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("run", "Compile and run a job on this machine (--nodes N: on N local agents)");
    app_->add_option("job", args_.job_path, "Job description file (JSON)")->required();
    app_->add_option("--devices", args_.devices, "Devices, e.g. cpu:2 (default: the job's train.devices)");
    app_->add_option("--steps", args_.steps, "Run this many steps instead of the job's")->check(positive());
    app_->add_option("--result", args_.result_path, "Write the result as JSON to this file");
    app_->add_option("--set", args_.overrides, "Override a job field, e.g. --set train.steps=100");
    app_->add_option("--trace", args_.trace_path,
                     "Write a Chrome-trace timeline of every act (with --nodes: one process per node)");
    app_->add_option("--stall-timeout", args_.stall_timeout_s,
                     "Stop and report when no actor acts for this many seconds")
        ->check(positive());
    app_->add_option("--resume", args_.resume,
                     "Resume from a checkpoint folder, or 'latest' under the job's checkpoint.dir");
    app_->add_option("--nodes", args_.nodes,
                     "Start this many agents on 127.0.0.1 and run the job on them (they exchange data through "
                     "shared memory)")
        ->check(CLI::Range(1, 254));
    app_->add_option("--ctrl-port", args_.ctrl_port,
                     "Control port of node 0 (data port: +1); node r's is 2r more (with --apart, the same on each "
                     "address)")
        ->check(CLI::Range(1, kMaxCtrlPort));
    app_->add_flag("--apart", args_.apart,
                   "With --nodes: each agent on an address of its own, 127.0.0.1..N, talking TCP as separate "
                   "machines do");
    app_->add_option("--logdir", args_.logdir, "Where the non-master agents write their logs");
    app_->add_option("--http", args_.http,
                     fmt::format("With --nodes: where the master agent serves its dashboard, /metrics and /api, "
                                 "ADDRESS:PORT or off (default {})",
                                 kDefaultHttp));
    app_->add_option("--metrics", metrics_path_,
                     "Append the training's metrics to this file as JSON lines (one process; with --nodes the master "
                     "writes job-1.jsonl in --logdir instead)");
    app_->add_option("--max-restarts", args_.max_restarts,
                     "With --nodes: an agent that dies is started again and the job resumes from its newest "
                     "checkpoint, up to this many times")
        ->check(CLI::NonNegativeNumber);
    app_->add_option("--min-nodes", args_.min_nodes, kMinNodesHelp)->check(CLI::PositiveNumber);
    app_->add_option("--replica-every", args_.replica_every, kReplicaEveryHelp)->check(CLI::NonNegativeNumber);
    app_->add_option("--replica-copies", args_.replica_copies, kReplicaCopiesHelp)->check(CLI::PositiveNumber);
    app_->add_flag("--insecure", insecure_, "With --nodes: no key for the local cluster (connections unencrypted)");
  }

  int act() override {
    if (Status flags = check_flags(); !flags.ok()) return fail_command(flags);
    if (args_.nodes > 1) {
      if (int code = check_outputs({{args_.result_path, "the result file"}, {args_.trace_path, "the trace file"}});
          code != 0)
        return code;
      args_.keyed = !insecure_;
      return run_local_cluster(args_);
    }
    return run_here();
  }

 private:
  // Flags that mean something only with --nodes, or only without, are
  // refused where they would do nothing.
  Status check_flags() const {
    const bool one = args_.nodes == 1;
    if (!one && !metrics_path_.empty())
      return invalid_argument("--metrics names one process's file; with --nodes the master writes job-1.jsonl in "
                              "--logdir");
    if (one && args_.min_nodes > 0)
      return invalid_argument("--min-nodes keeps a cluster going without a lost node: it needs --nodes N (or rill "
                              "agent and rill submit)");
    for (const auto& [flag, asked] : {std::pair<const char*, bool>{"--replica-every", args_.replica_every > 0},
                                      {"--replica-copies", args_.replica_copies > 0}})
      if (asked && (args_.min_nodes == 0 || args_.min_nodes >= args_.nodes))
        return invalid_argument("{} copies each node's pieces for a job that goes on without a lost node: it needs "
                                "--nodes N and --min-nodes below N",
                                flag);
    if (one && args_.max_restarts > 0)
      return invalid_argument(
          "--max-restarts restarts lost nodes: it needs a cluster (--nodes N, or rill agent and rill submit)");
    for (const char* flag : {"--logdir", "--ctrl-port", "--apart"})
      if (one && app_->count(flag) > 0)
        return invalid_argument("{} places the local cluster's agents: it needs --nodes N (one process starts none)",
                                flag);
    if (!one && !args_.apart && args_.ctrl_port + 2 * (args_.nodes - 1) > kMaxCtrlPort)
      return invalid_argument("--ctrl-port {} leaves no room for {} agents on one address (node r takes port {} + 2r, "
                              "at most {}): a lower port, or --apart",
                              args_.ctrl_port, args_.nodes, args_.ctrl_port, kMaxCtrlPort);
    if (one && insecure_)
      return invalid_argument(
          "--insecure leaves a local cluster without its key: it needs --nodes N (one process has no connections)");
    if (one && !args_.http.empty())
      return invalid_argument("--http places the local cluster's dashboard: it needs --nodes N (one process serves "
                              "none)");
    return {};
  }

  // The job in this process.
  int run_here() {
    auto job = graph::load_job_file(args_.job_path, args_.overrides);
    if (!job.ok()) return fail_command(job.status());
    // Files written at the run's end, found unwritable before it starts.
    if (int code = check_outputs({{args_.result_path, "the result file"},
                                  {args_.trace_path, "the trace file"},
                                  {metrics_path_, "the metrics file"}});
        code != 0)
      return code;
    JobRunOptions options;
    options.devices = args_.devices;
    options.steps = args_.steps;
    options.stall_timeout_s = args_.stall_timeout_s;
    options.trace_file = args_.trace_path;
    options.resume = args_.resume;
    options.metrics_file = metrics_path_;
    // Ctrl-C or SIGTERM: the job stops at a step boundary and says what it
    // kept; a second one stops the process at once.
    interrupts::install(2);
    options.stop = &interrupts::stop_requested();
    JobResult result = run_job(*job, options);
    if (!args_.result_path.empty()) {
      Status written = write_text_file(args_.result_path, result_json(result));
      if (!written.ok()) return fail_command(written);
    }
    if (!result.status.ok()) return fail_command(result.status);
    return result.interrupted ? interrupts::exit_code() : 0;
  }

  ClusterRunArgs args_ = defaults();
  std::string metrics_path_;
  bool insecure_ = false;

  static ClusterRunArgs defaults() {
    ClusterRunArgs args;
    args.nodes = 1;
    args.ctrl_port = kDefaultCtrlPort;
    args.stall_timeout_s = 60.0;
    return args;
  }
};

}  // namespace

std::unique_ptr<Command> run_command() { return std::make_unique<RunCommand>(); }

}  // namespace rill::cli
