// compile(): runs the passes in order; parse_devices(); the number of steps.
#include "compiler/compiler.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "base/devices.h"

#include "compiler/autograd.h"
#include "compiler/boxing.h"
#include "compiler/checkpoint_writers.h"
#include "compiler/fusion.h"
#include "compiler/gradient_norm.h"
#include "compiler/optimizer.h"
#include "compiler/physical.h"
#include "compiler/pipeline_cut.h"
#include "compiler/plan_writer.h"
#include "compiler/pserver.h"
#include "compiler/regst_planning.h"
#include "compiler/ring_balance.h"
#include "compiler/ring_expansion.h"
#include "compiler/sbp_deduction.h"
#include "compiler/transfers.h"
#include "compiler/validate.h"
#include "kernels/data/dataset.h"

namespace rill::compiler {
namespace {

StatusOr<int64_t> num_samples(const graph::Dataset& spec, const FileAccess& access) {
  // Counting a pipe's samples would drain it before the node that reads it.
  for (const std::string* file : {&spec.images, &spec.labels, &spec.path}) {
    struct stat st {};
    if (!file->empty() && ::stat(file->c_str(), &st) == 0 && S_ISFIFO(st.st_mode))
      return invalid_argument("dataset '{}': '{}' is a pipe, so its samples cannot be counted ahead: give train.steps "
                              "(or --steps) rather than epochs",
                              spec.name, *file);
  }
  auto dataset = Dataset::open(spec, access);
  if (!dataset.ok()) return dataset.status().with_context(fmt::format("dataset '{}'", spec.name));
  return (*dataset)->num_samples();
}

// options.steps if > 0; else train.steps; else epochs over the smallest
// dataset read. Eval: one pass over the eval dataset, the remainder dropped.
StatusOr<int64_t> plan_steps(const graph::Job& job, const LogicalGraph& g, const CompileOptions& options) {
  if (options.steps < 0 || options.steps > graph::kMaxSteps)
    return invalid_argument("steps is {}, expected 0 to {}", options.steps, graph::kMaxSteps);
  if (options.mode == Mode::kTrain && job.train.steps > graph::kMaxSteps)
    return invalid_argument("train.steps is {}, more than the most a job may run ({})", job.train.steps,
                            graph::kMaxSteps);
  if (options.steps > 0) return options.steps;
  if (options.mode == Mode::kTrain && job.train.steps < 0)
    return invalid_argument("train.steps is {}, expected >= 0", job.train.steps);
  if (options.mode == Mode::kTrain && job.train.steps > 0) return job.train.steps;
  if (options.mode == Mode::kTrain && job.train.epochs <= 0)
    return invalid_argument("train: neither steps nor epochs is set");
  if (g.datasets.empty()) return invalid_argument("cannot count steps: the job reads no dataset");
  int64_t samples = -1;
  for (const graph::Dataset& d : g.datasets) {
    RILL_ASSIGN_OR_RETURN(int64_t n, num_samples(d, options.data_access));
    samples = samples < 0 ? n : std::min(samples, n);
  }
  int64_t per_pass = samples / g.global_batch;
  if (per_pass == 0)
    return invalid_argument("dataset '{}' has {} samples, fewer than one batch of {}", g.datasets[0].name, samples,
                            g.global_batch);
  if (options.mode == Mode::kEval) return per_pass;
  int64_t steps = 0;
  if (__builtin_mul_overflow(job.train.epochs, per_pass, &steps) || steps > graph::kMaxSteps)
    return invalid_argument("train.epochs {} x {} steps per epoch is more than the most a job may run ({})",
                            job.train.epochs, per_pass, graph::kMaxSteps);
  return steps;
}

// The logical passes, up to SBP deduction.
// The logical graph of `given` with its SBP deduced, rings not yet expanded.
StatusOr<LogicalGraph> deduce(const graph::Job& given, const Cluster& cluster, Mode mode) {
  RILL_ASSIGN_OR_RETURN(const graph::Job transpiled, transpile_pserver(given, cluster));
  RILL_ASSIGN_OR_RETURN(const graph::Job cut, cut_stages(transpiled, cluster));
  const graph::Job job = fuse_ops(cut);
  RILL_ASSIGN_OR_RETURN(LogicalGraph g, build_logical_graph(job, cluster, mode));
  RILL_RETURN_IF_ERROR(check_stage_devices(job, g));
  g.sum_moved_partials = given.pserver_mode();
  g.async_pserver = g.sum_moved_partials && !given.distributed->sync_mode && mode == Mode::kTrain;
  if (g.async_pserver && given.distributed->enable_dc_asgd) g.dc_asgd_lambda = kDcAsgdLambda;
  if (g.sum_moved_partials) {
    g.rpc_send_threads = static_cast<int>(given.distributed->rpc_send_thread_num);
    g.rpc_get_threads = static_cast<int>(given.distributed->rpc_get_thread_num);
    g.rpc_prefetch_threads = static_cast<int>(given.distributed->rpc_prefetch_thread_num);
  }
  if (mode == Mode::kTrain) {
    RILL_RETURN_IF_ERROR(add_loss_scale_state(job.train, &g));
    RILL_RETURN_IF_ERROR(build_backward(&g));
    RILL_RETURN_IF_ERROR(attach_optimizer(job.optimizer, &g));
  }
  RILL_RETURN_IF_ERROR(deduce_sbp(&g));
  return g;
}

// deduce(), compiled again in the zigzag order where that balances the
// rings (compiler/ring_balance.h), then the rings expanded.
StatusOr<LogicalGraph> deduced_graph(const graph::Job& given, const Cluster& cluster, Mode mode) {
  RILL_ASSIGN_OR_RETURN(LogicalGraph g, deduce(given, cluster, mode));
  RILL_ASSIGN_OR_RETURN(const RingBalance balance, ring_balance(given, g));
  g.natural_order_because = balance.natural_because;
  if (balance.parts > 1) {
    RILL_ASSIGN_OR_RETURN(const graph::Job ordered, in_zigzag_order(given, balance.parts));
    RILL_ASSIGN_OR_RETURN(LogicalGraph reordered, deduce(ordered, cluster, mode));
    if (causal_rings(reordered).parts == balance.parts)
      g = std::move(reordered);
    else  // the natural order's plan stands
      g.natural_order_because = "in the zigzag order SBP deduction lays the rings out otherwise";
  }
  RILL_RETURN_IF_ERROR(expand_rings(&g));
  return g;
}

StatusOr<std::string> compile_job(const graph::Job& job, const Cluster& cluster, const CompileOptions& options) {
  if (options.activation_register_num < 1)
    return invalid_argument("activation_register_num is {}, expected at least 1", options.activation_register_num);
  RILL_ASSIGN_OR_RETURN(LogicalGraph g, deduced_graph(job, cluster, options.mode));
  RILL_RETURN_IF_ERROR(insert_boxing(&g));
  RILL_ASSIGN_OR_RETURN(int64_t steps, plan_steps(job, g, options));
  const auto bucket_bytes = static_cast<size_t>(std::max<int64_t>(0, job.train.bucket_bytes));
  if (options.node >= cluster.num_nodes)
    return invalid_argument("node {} is not in the cluster's nodes 0 to {}", options.node, cluster.num_nodes - 1);
  RILL_ASSIGN_OR_RETURN(TaskGraph tasks, expand(g, bucket_bytes, std::max(-1, options.node),
                                                GradientCompression{job.train.compression,
                                                                    static_cast<int>(job.train.compression_rank),
                                                                    job.train.compression_start_step}));
  tasks.steps = steps;
  RILL_RETURN_IF_ERROR(insert_transfers(&tasks));
  RILL_RETURN_IF_ERROR(insert_copies(&tasks));
  RILL_RETURN_IF_ERROR(plan_regsts(options.activation_register_num, &tasks));
  return write_plan(tasks);
}

}  // namespace

StatusOr<Cluster> parse_devices(const std::string& text, int num_nodes) {
  if (num_nodes < 1) return invalid_argument("devices '{}': {} nodes, expected at least 1", text, num_nodes);
  RILL_ASSIGN_OR_RETURN(DeviceList list, parse_device_list(text));
  Cluster cluster;
  cluster.num_nodes = num_nodes;
  cluster.device_type = list.type;
  cluster.devices_per_node = list.count;
  return cluster;
}

StatusOr<std::vector<VariablePieceOrigin>> variable_pieces(const graph::Job& job, const Cluster& cluster) {
  auto g = deduced_graph(job, cluster, Mode::kTrain);
  if (!g.ok()) return g.status().with_context(fmt::format("compiling job '{}'", job.name));
  std::vector<VariablePieceOrigin> out;
  CheckpointWriters writers;  // as the plans choose them (physical.cc)
  for (const VariableNode& v : g->variables) {
    const graph::Placement& p = g->placement(v.placement);
    const std::vector<bool> writes = writers.writers(v, p);
    // A pserver's block is a piece of the variable it was cut from.
    const auto& block = v.variable.block_of;
    for (int rank = 0; rank < p.parallel(); ++rank) {
      if (!writes[static_cast<size_t>(rank)]) continue;
      std::vector<int64_t> origin = piece_region(v.variable.shape, v.sbp, p.num_nodes(), p.per_node(), rank).origin;
      if (block && !origin.empty()) origin[0] += block->row_offset;
      out.push_back({block ? block->whole : v.variable.name, origin, p.node_of(rank)});
    }
  }
  return out;
}

StatusOr<std::string> compile(const graph::Job& job, const Cluster& cluster, const CompileOptions& options) {
  auto bytes = compile_job(job, cluster, options);
  if (!bytes.ok()) return bytes.status().with_context(fmt::format("compiling job '{}'", job.name));
  return bytes;
}

}  // namespace rill::compiler
