// `rill plan`: a job compiled as its run would compile it, summed up (the
// default), printed whole as JSON (--json), as statistics (--stats) or drawn
// as Graphviz DOT (--dot); --node compiles one node's plan alone, as its
// agent does. --memory-limit fails a plan that any node's memory zone (a
// GPU, or a node's host memory for its CPU devices) would need more of.
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "compiler/pserver.h"
#include "graph/job_file.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/plan_stats.h"
#include "runtime/cluster/cluster_config.h"

namespace rill::cli {
namespace {

class PlanCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("plan", "Compile a job and print its physical plan");
    app_->add_option("job", job_path_, "Job description file (JSON)")->required();
    app_->add_option("--devices", devices_, "Devices per node, e.g. cpu:2");
    app_->add_option("--nodes", nodes_, "Number of nodes")->check(CLI::Range(1, 4096));
    app_->add_option("--set", overrides_, "Override a job field");
    app_->add_flag("--json", json_,
                   "Print the whole plan as JSON (tasks, regsts, memory), instead of its summary (with --dot or "
                   "--stats, besides them)");
    app_->add_option("--node", node_, "Compile only this node's plan, as its agent does (ids are the whole plan's)")
        ->check(CLI::Range(0, 4095));
    app_->add_flag("--stats", stats_,
                   "Print only the compile time, the plan's size (tasks, regsts, bytes), its communicators, how GPU "
                   "regsts change memory zones (copies, sends through host memory) and the time its memory plan "
                   "takes");
    app_->add_option("--memory-limit", memory_limit_,
                     "Fail, naming them, where a node's memory zone (a GPU's memory, or the node's host memory for "
                     "its CPU devices) would peak above this many bytes (a suffix KiB, MiB or GiB)");
    app_->add_option("--dot", dot_path_, "Write the plan as Graphviz DOT to this file, a box per op");
    app_->add_flag("--dot-tasks", dot_tasks_,
                   "With --dot: a box per task, clustered by node and thread (large plans take long to render)");
  }

  int act() override {
    if (!memory_limit_.empty()) {
      auto limit = parse_byte_size(memory_limit_);
      if (!limit.ok()) return fail_command(limit.status().with_context("--memory-limit"));
    }
    auto job = graph::load_job_file(job_path_, overrides_);
    if (!job.ok()) return fail_command(job.status());
    auto cluster = compiler::parse_devices(devices_.empty() ? job->train.devices : devices_, nodes_);
    if (!cluster.ok()) return fail_command(cluster.status());
    if (job->pserver_mode()) {
      // Fluid's FLAGS_rpc_* as a run reads them; pservers by node number
      // (there is no machine list here).
      if (Status resolved = resolve_distributed(&*job, {}); !resolved.ok()) return fail_command(resolved);
      // The layout on stderr, so that the plan on stdout (--json) stays JSON.
      auto layout = compiler::pserver_layout(*job, *cluster);
      if (!layout.ok()) return fail_command(layout.status());
      fmt::print(stderr, "{}", compiler::describe_pserver_layout(*layout, *job));
    }
    const auto start = std::chrono::steady_clock::now();
    compiler::CompileOptions options;
    options.node = node_;
    auto bytes = compiler::compile(*job, *cluster, options);
    if (!bytes.ok()) return fail_command(bytes.status());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto verified = compiler::verify_plan(*bytes);
    if (!verified.ok()) return fail_command(verified.status());
    if (stats_) print_plan_stats(**verified, bytes->size(), seconds);
    if (!memory_limit_.empty()) {
      if (Status fits = check_memory_limit(**verified); !fits.ok()) return fail_command(fits);
    }
    if (!dot_path_.empty()) {
      Status written = write_text_file(
          dot_path_, dot_tasks_ ? compiler::plan_dot(**verified) : compiler::plan_dot_ops(**verified));
      if (!written.ok()) return fail_command(written);
      if (!json_)  // with --json, the output is the JSON alone
        fmt::print("plan drawn as Graphviz DOT in {} (render: dot -Tsvg {} -o plan.svg)\n", dot_path_, dot_path_);
    }
    if (json_) fmt::print("{}\n", compiler::plan_json(**verified));
    else if (dot_path_.empty() && !stats_)
      fmt::print("{}compiled in {:.3f} s; the whole plan: --json; its size and timings: --stats; drawn: --dot FILE\n",
                 plan_summary(**verified), seconds);
    return 0;
  }

 private:
  // Each node's zones' planned peaks against --memory-limit.
  Status check_memory_limit(const plan::Plan& plan) const {
    RILL_ASSIGN_OR_RETURN(const int64_t limit, parse_byte_size(memory_limit_));
    std::vector<std::string> over;
    const int first = plan.node() >= 0 ? plan.node() : 0, last = plan.node() >= 0 ? plan.node() : plan.num_nodes() - 1;
    for (int node = first; node <= last; ++node) {
      RILL_ASSIGN_OR_RETURN(const compiler::MemoryPlan memory, compiler::plan_memory(plan, node));
      for (const compiler::MemoryBlock& b : memory.blocks)
        if (b.total() > limit)
          over.push_back(fmt::format("node {} {} peaks at {} bytes", node, b.zone.to_string(), b.total()));
    }
    if (over.empty()) return {};
    return invalid_argument("the plan does not fit --memory-limit {} ({} bytes): {}", memory_limit_, limit,
                              fmt::join(over, "; "));
  }

  std::string job_path_, devices_, dot_path_, memory_limit_;
  std::vector<std::string> overrides_;
  int nodes_ = 1;
  int node_ = -1;
  bool json_ = false, stats_ = false, dot_tasks_ = false;
};

}  // namespace

std::unique_ptr<Command> plan_command() { return std::make_unique<PlanCommand>(); }

}  // namespace rill::cli
