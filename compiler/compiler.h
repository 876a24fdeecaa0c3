// The compiler: turns a logical graph::Job into a physical Plan (compiler/plan.fbs)
// for a cluster. The passes, one per file, run in this order:
//   validate (validate.h) -> autograd (autograd.h) -> optimizer (optimizer.h)
//   -> SBP deduction (sbp_deduction.h) -> boxing insertion (boxing.h)
//   -> physical expansion into a task graph (physical.h) -> Send/Recv where
//   a GPU regst crosses nodes (transfers.h) -> regst planning
//   (regst_planning.h) -> Plan bytes (plan_writer.h).
// The plan's bytes are all a runtime needs to build its actors, and the same job
// always compiles to the same bytes. A whole plan covers every node; a node's
// plan (CompileOptions::node, what each agent compiles for itself) holds what
// that node runs, the same as node_plan cuts out of the whole plan.
//
// Threading: every function here is pure (no shared state); call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/actor_id.h"
#include "base/file_access.h"
#include "base/status.h"
#include "compiler/plan_generated.h"
#include "graph/job.h"

namespace rill::compiler {

// 2: per-node boxing, Send/Recv tasks, node plans (Plan.node, Plan.num_tasks).
// 3: Copy tasks between host and device memory; tasks on cuda devices.
// 4: 2-D SBP (NdSbp) on regsts and boxings; sources' sub-shards.
// 5: placements (Plan.placements, Task.placement); moves (BoxingConf.origins).
// 6: node plans compiled by each node; micro-batches (Plan.micro_batches,
//    Task.acts_per_step, RegstDesc.readies_per_step).
// 7: the micro-batch schedule and pipeline stages (Plan.schedule, Plan.stages).
// 8: the mirrored view (SinkConf.ranks: metrics and fetched tensors per rank).
// 9: host regsts read across nodes directly (no Send/Recv between CPU
//    devices; a node plan lists another node's regst with its own readers);
//    collective ops (a boxing's logical shape is its outputs').
// 10: sources check indices against their readers' bounds
//     (SourceConf.index_bounds); compute tasks know where their input
//     pieces lie (Task.input_offsets: dropout's mask).
inline constexpr uint32_t kPlanVersion = 10;

// The devices a job runs on: num_nodes nodes with devices_per_node devices each.
// A device's rank is node * devices_per_node + device.
struct Cluster {
  int num_nodes = 1;
  int devices_per_node = 1;
  DeviceType device_type = DeviceType::kCpu;
  int parallel() const { return num_nodes * devices_per_node; }
};

// Parses a device list such as "cpu:2" or "cuda:4" (devices per node).
StatusOr<Cluster> parse_devices(const std::string& text, int num_nodes);

enum class Mode { kTrain, kEval };

struct CompileOptions {
  Mode mode = Mode::kTrain;         // kEval: forward only over job.eval's dataset
  int64_t steps = 0;                // > 0 overrides the job's steps
  int activation_register_num = 2;  // slots of every non-model regst (>= 1)
  // >= 0: compile only this node's plan. Every node can compile its own: the
  // ids are the whole plan's (tasks of other nodes are numbered, not built),
  // so the plans agree on everything they share (Send/Recv pairs, peers).
  // The plan equals node_plan(whole, node) but for the ids of Copy tasks and
  // their regsts, which are numbered per node after every other id.
  int node = -1;
  // Where the job's dataset files may lie (an agent's data roots), checked
  // as each is opened to count its samples; by default anywhere.
  FileAccess data_access;
};

// Compiles `job` for `cluster`; returns the Plan's bytes (FlatBuffers, "RLPL"):
// the whole plan, or one node's (options.node).
StatusOr<std::string> compile(const graph::Job& job, const Cluster& cluster, const CompileOptions& options);

// The distinct pieces of the job's variables over the cluster (replicas
// once): what a checkpoint holds, and which node writes each into its file
// (compiler/checkpoint_writers.h).
struct VariablePieceOrigin {
  std::string name;
  std::vector<int64_t> offset;  // of the piece in the logical variable
  int writer = 0;               // the node that writes it
};
StatusOr<std::vector<VariablePieceOrigin>> variable_pieces(const graph::Job& job, const Cluster& cluster);

// Runs the FlatBuffers verifier over `bytes`, checks the version and the plan's
// internal references, for a whole plan or a node plan: tasks ascending by
// ActorId index (so ids are unique) and below num_tasks, in a node plan all on
// its node; regsts ascending by id; every regst a task names is in the plan;
// producers and consumers on the plan's node are tasks of the plan. In a whole
// plan positions are indices too (task i has index i, regst i has id i). The
// returned pointer points into `bytes`, which must outlive it.
StatusOr<const plan::Plan*> verify_plan(std::string_view bytes);

// The plan of one node, cut from a whole plan: the tasks on `node` and the
// regsts they produce or consume (another node's regst read here with this
// node's consumers only), every id global as in the whole plan, all datasets, node set
// and num_tasks the whole plan's task count. Errors: bytes that do not verify,
// a plan that is already a node plan, a node out of range.
StatusOr<std::string> node_plan(std::string_view whole_plan_bytes, int node);

// Look-ups in a verified plan (whole or node): the regst with global id `id`,
// the task with actor id `id`, or nullptr. O(1) on a whole plan (position ==
// id); a binary search on a node plan, whose vectors are sorted by id.
const plan::RegstDesc* find_regst(const plan::Plan& plan, int64_t id);
const plan::Task* find_task(const plan::Plan& plan, uint64_t id);

// The SBP a plan records (B when absent).
NdSbp read_sbp(const plan::NdSbp* sbp);
// A verified plan's dtype (verify_plan refuses a value this build does not know).
DType read_dtype(plan::DType dtype);

// A JSON summary: {"job", "steps", "tasks": [...], "regsts": [...]}.
std::string plan_json(const plan::Plan& plan);
// Graphviz: tasks as nodes clustered by node and thread, regsts as edges.
std::string plan_dot(const plan::Plan& plan);
// The same with a box per op (its tasks on every device and node, and its
// gradient's, together), or, where that makes over 120 boxes, per group of
// ops by their dotted names ("h0.attn.q" and "h0.attn.k" as "h0.attn", then
// as "h0"): readable, and drawn in seconds, for plans of thousands of tasks.
// "" where that still makes over `max_boxes` boxes (0: no bound).
std::string plan_dot_ops(const plan::Plan& plan, size_t max_boxes = 0);

}  // namespace rill::compiler
