// `rill submit`: a job file sent to a cluster's master, its progress
// followed (--follow), its result and timeline written where asked.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/key_flags.h"
#include "graph/job_file.h"
#include "runtime/cluster/client.h"

namespace rill::cli {
namespace {

int submit(const std::string& job_path, const std::string& master, const std::string& result_path,
           const std::string& trace_path, bool follow, const SubmitOptions& submit) {
  auto text = read_job_text(job_path);  // the master has no folder of the file's
  if (!text.ok()) return fail_command(text.status());
  auto client = Client::connect(master, 10.0, /*running=*/true);
  if (!client.ok()) return fail_command(client.status());
  SubmitOptions options = submit;
  options.trace = !trace_path.empty();
  // On a terminal the step lines take each other's place (a line redrawn in
  // place); piped, every line stays.
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  bool step_shown = false;
  if (follow)
    options.on_line = [terminal, &step_shown](const std::string& line) {
      const bool step = terminal && line.rfind("step ", 0) == 0;
      // The last step line stays when another kind of line follows.
      fmt::print("{}{}{}", step_shown ? (step ? "\r\033[K" : "\n") : "", line, step ? "" : "\n");
      std::fflush(stdout);
      step_shown = step;
    };
  auto result = (*client)->submit_text(*text, job_path, options);
  if (step_shown) fmt::print("\n");
  if (!result.ok()) return fail_command(result.status());
  if (!result_path.empty()) {
    Status written = write_text_file(result_path, result->result_json);
    if (!written.ok()) return fail_command(written);
  }
  if (Status traced = write_job_trace(trace_path, *result); !traced.ok()) return fail_command(traced);
  if (!result->status.ok()) return fail_command(result->status);
  auto j = nlohmann::json::parse(result->result_json, nullptr, false);
  if (!j.is_discarded() && j.value("interrupted", false))
    fmt::print("job {} stopped at step {} of {} (rill stop)\n", result->job_id, j["steps"].get<int64_t>(),
               j["planned_steps"].get<int64_t>());
  else
    fmt::print("job {} done\n", result->job_id);
  return 0;
}

class SubmitCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("submit", "Submit a job to a cluster's master agent");
    app_->add_option("job", job_path_, "Job description file (JSON)")->required();
    app_->add_option("--master", master_, "The master's address[:port]")->required();
    app_->add_option("--result", result_path_, "Write the result as JSON to this file");
    app_->add_option("--trace", trace_path_, "Write a Chrome-trace timeline of every node's acts (one process per node)");
    app_->add_flag("--follow", follow_, "Print the master's progress lines");
    app_->add_option("--devices", options_.devices, "Devices per node (default: the agents')");
    app_->add_option("--steps", options_.steps, "Run this many steps instead of the job's")->check(positive());
    app_->add_option("--set", options_.overrides, "Override a job field");
    app_->add_option("--resume", options_.resume, "Resume from a checkpoint folder, or 'latest'");
    app_->add_option("--max-restarts", options_.max_restarts,
                     "When a node is lost, run the job again from its newest checkpoint once the node's agent is back, "
                     "up to this many times")
        ->check(CLI::NonNegativeNumber);
    app_->add_option("--min-nodes", options_.min_nodes, kMinNodesHelp)->check(CLI::PositiveNumber);
    app_->add_option("--replica-every", options_.replica_every, kReplicaEveryHelp)->check(CLI::NonNegativeNumber);
    app_->add_option("--replica-copies", options_.replica_copies, kReplicaCopiesHelp)->check(CLI::PositiveNumber);
    key_.add_key(app_);
    key_.add_insecure(app_, "Connect without a key (to agents started with --insecure)");
  }
  int act() override {
    if (int code = key_.apply(/*client_key_does=*/true); code != 0) return code;
    if (int code = check_outputs({{result_path_, "the result file"}, {trace_path_, "the trace file"}}); code != 0)
      return code;
    return submit(job_path_, master_, result_path_, trace_path_, follow_, options_);
  }

 private:
  std::string job_path_, master_, result_path_, trace_path_;
  bool follow_ = false;
  SubmitOptions options_;
  KeyFlags key_;
};

}  // namespace

std::unique_ptr<Command> submit_command() { return std::make_unique<SubmitCommand>(); }

}  // namespace rill::cli
