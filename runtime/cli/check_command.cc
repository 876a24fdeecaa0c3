// `rill check JOB`: the job as `rill run` would take it (--set applied, then
// checked), then what this machine can check of its data: every input's
// shape against its files' heads, each dataset it can read here read whole
// as the run reads it (a file missing here, or a pipe, is a note), and the
// index fields (token ids, labels) against the ops reading them, over the
// job's plan for --nodes x --devices (given --nodes, a plan those nodes
// cannot hold is an error; else a note).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/compiler.h"
#include "compiler/pserver.h"
#include "graph/job_check.h"
#include "graph/job_file.h"
#include "kernels/data/dataset.h"
#include "kernels/data/dataset_peek.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/node/index_check.h"

namespace rill {
namespace {

struct CheckArgs {
  std::string job_path;
  std::vector<std::string> overrides;
  std::string devices;  // "" : the job's train.devices
  int nodes = 1;
  bool nodes_given = false;
};

// A batch larger than a dataset the plan reads (read here: `opened`), which
// the run refuses at its first step (training's batch sampler) or as its
// eval pass is compiled, after every training step.
Status check_batches(const plan::Plan& plan, const std::map<std::string, std::shared_ptr<const Dataset>>& opened,
                     compiler::Mode mode) {
  if (plan.datasets() == nullptr) return {};
  for (const plan::Dataset* d : *plan.datasets()) {
    const std::string name = d->name() ? d->name()->str() : std::string();
    auto found = opened.find(name);
    if (found == opened.end() || plan.global_batch() <= found->second->num_samples()) continue;
    return invalid_argument("{} batch {} is larger than dataset '{}' ({} samples): the {} would fail{}; lower {}",
                            mode == compiler::Mode::kEval ? "the eval" : "the global", plan.global_batch(), name,
                            found->second->num_samples(),
                            mode == compiler::Mode::kEval ? "eval pass" : "first step",
                            mode == compiler::Mode::kEval ? " after training" : "",
                            mode == compiler::Mode::kEval ? "eval.batch_size" : "train.batch_size");
  }
  return {};
}

int check_job(const CheckArgs& args) {
  // The job as rill run would take it (overrides applied, then checked),
  // then its inputs against what the data files hold, where they can be read.
  auto checked = graph::load_job_file(args.job_path, args.overrides);
  if (!checked.ok()) return fail_command(checked.status());
  std::vector<std::string> unreadable;
  if (Status data = graph::check_job_data(*checked, &unreadable); !data.ok())
    return fail_command(data.with_context(args.job_path));
  for (const std::string& why : unreadable)
    fmt::print("{}: note: {} (its inputs' shapes are checked where the job runs)\n", args.job_path, why);
  // Every dataset whose files can be read here is read whole, as the run
  // reads it: headers, counts and contents that disagree are errors now.
  std::map<std::string, std::shared_ptr<const Dataset>> opened;
  for (const graph::Dataset& d : checked->datasets)
    if (unreadable_here(d).empty()) {
      auto data = Dataset::open(d);
      if (!data.ok()) return fail_command(data.status().with_context(args.job_path));
      opened[d.name] = std::move(*data);
    }
  // Indices (token ids, labels) against the ops reading them, over the
  // data that can be read here: the job's plan (for --nodes x --devices,
  // or its train.devices) says which fields each op bounds, as the
  // sources check before their first step.
  auto cluster = compiler::parse_devices(args.devices.empty() ? checked->train.devices : args.devices, args.nodes);
  if (!cluster.ok()) return fail_command(cluster.status());
  if (checked->pserver_mode())
    if (Status resolved = resolve_distributed(&*checked, {}); !resolved.ok()) return fail_command(resolved);
  for (const compiler::Mode mode : {compiler::Mode::kTrain, compiler::Mode::kEval}) {
    if (mode == compiler::Mode::kEval && !checked->eval) continue;
    auto plan = compiler::compile(*checked, *cluster, {.mode = mode, .steps = 1});
    // Without --nodes, a layout one node cannot hold (placements on other
    // nodes, pservers: kFailedPrecondition) is a note; any other error is the job's.
    if (!plan.ok() && (args.nodes_given || plan.status().code() != Code::kFailedPrecondition))
      return fail_command(plan.status().with_context(args.job_path));
    if (!plan.ok()) {
      fmt::print("{}: note: indices are checked where the job runs, or here with --nodes ({})\n", args.job_path,
                 plan.status().message());
      break;
    }
    const plan::Plan& compiled = *plan::GetPlan(plan->data());
    if (Status batches = check_batches(compiled, opened, mode); !batches.ok())
      return fail_command(batches.with_context(args.job_path));
    if (Status indices = check_plan_indices(compiled, &opened); !indices.ok())
      return fail_command(indices.with_context(args.job_path));
  }
  fmt::print("{}: ok\n", args.job_path);
  return 0;
}

}  // namespace

namespace cli {
namespace {

class CheckCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("check", "Validate a job description file");
    app_->add_option("job", args_.job_path, "Job description file (JSON)")->required();
    app_->add_option("--set", args_.overrides, "Override a job field, as rill run takes it");
    app_->add_option("--nodes", args_.nodes, "Check the plan for this many nodes (placements on other nodes, pservers)")
        ->check(CLI::Range(1, 4096));
    app_->add_option("--devices", args_.devices, "Devices per node, e.g. cpu:2");
  }
  int act() override {
    args_.nodes_given = app_->count("--nodes") > 0;
    return check_job(args_);
  }

 private:
  CheckArgs args_;
};

}  // namespace

std::unique_ptr<Command> check_command() { return std::make_unique<CheckCommand>(); }

}  // namespace cli
}  // namespace rill
