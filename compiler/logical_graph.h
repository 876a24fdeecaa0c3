// LogicalGraph: the compiler's view of a job between the logical passes
// (validate, autograd, optimizer, SBP deduction, boxing insertion). Every tensor
// has one producer: an input, a variable or an op output. Ops are kept in a
// topological order; autograd appends backward ops after the forward ones.
// Passes mutate it in turn; a value owned by one compile() call.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "graph/job.h"
#include "kernels/op.h"

namespace rill::compiler {

enum class TensorOrigin : uint8_t { kInput, kVariable, kOp };

struct LogicalTensor {
  std::string name;
  TensorMeta meta;  // logical (whole) tensor
  TensorOrigin origin = TensorOrigin::kOp;
  int producer = -1;     // index into inputs, variables or ops, by origin
  int output_index = 0;  // kOp: which output of the producer
  NdSbp sbp;             // set by SBP deduction
  int placement = 0;     // its producer's: index into LogicalGraph::placements
  // Made once per micro-batch (train.micro_batches > 1): what a source reads
  // and everything computed from it, up to the accumulation of gradients;
  // variables and what is computed from them alone are made once per step.
  bool per_micro = false;
  // Made per micro-batch by the forward pass (or read from data): the
  // pipeline stage that makes it (mark_stages), else -1.
  int stage = -1;
  // Made from a trained variable's model, through ops: made for step n + 1
  // only after step n's updates (regst planning gives such regsts one slot).
  bool after_updates = false;
  // The mirrored view: the tensor as one rank holds it (its piece, which its
  // tasks see as the whole), inferred from the ranks' own inputs through the
  // forward ops; unset where an op infers nothing from them.
  std::optional<TensorMeta> local;
};

struct InputNode {
  graph::Input input;
  std::string dataset;  // the dataset read: the input's own, or the eval dataset
  NdSbp sbp = Sbp::split(0);
  int placement = 0;
};

struct VariableNode {
  graph::Variable variable;
  NdSbp sbp = Sbp::broadcast();
  std::string grad;       // train mode, trainable and on a path to the loss: its gradient
  std::string update_op;  // set by the optimizer pass when grad is set
  Attrs update_attrs;
  int num_state = 0;
  int grad_boxing = -1;   // index into LogicalGraph::boxings, or -1
  int placement = 0;
  // Loss scaling (compiler/gradient_norm.h): the step's gate, an i32 scalar
  // the update reads as its third input ("": none), and its boxing.
  std::string gate;
  int gate_boxing = -1;
};

struct OpNode {
  std::string name;
  std::string type;
  const OpDef* def = nullptr;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  Attrs attrs;
  std::vector<std::optional<NdSbp>> output_hints;
  // What an input must be as the op reads it (train.zero's gathered
  // weights), boxed to it if it lies otherwise; empty or unset: any.
  std::vector<std::optional<NdSbp>> input_hints;
  bool backward = false;
  int placement = 0;  // index into LogicalGraph::placements (a backward op: its forward op's)
  std::string recompute;  // a forward op's recompute group (graph/job.h Op); "": none
  // Set by SBP deduction: the chosen signature.
  std::vector<NdSbp> input_sbp;
  std::vector<NdSbp> output_sbp;
  // The chosen signature is a ring's (OpDef::ring_sbp), which
  // expand_rings replaces by an op per step (compiler/ring_expansion.h).
  bool ring = false;
  // Per input, set by expand_rings: read the piece that many places back on
  // the ring along axis `ring_axis` of the input (the rank holding the same
  // region but for that axis, `steps` pieces earlier, the sequence's
  // start wrapping to its end), not the rank's own; empty: every rank its own.
  std::vector<int> ring_steps;
  int ring_axis = -1;
  // Set by boxing insertion: per input, index into LogicalGraph::boxings or -1.
  std::vector<int> input_boxing;
};

// Turns every piece of `tensor` from `in` into `out` (one task per node).
// A 2-D conversion that no one task does is a chain of boxings, each reading
// the one before (`from`). A move (placement != to) copies the pieces of a
// split or B tensor onto another placement: slices and whole pieces sent
// where they are needed and assembled there.
struct LogicalGraph;

struct BoxingNode {
  std::string tensor;
  NdSbp in;
  NdSbp out;
  int from = -1;  // the boxing whose output this one reads; -1: the tensor's producer
  int placement = 0;  // where `in` lives (and `out`, unless a move)
  int to = 0;         // where `out` lives
  // A collective op's input (the mirrored view): the ranks' pieces of
  // `tensor`, each read whole as a piece of this tensor in `in` (P: each
  // rank's value a part of a sum; S(0): rank r's rows r*n .. r*n + n - 1).
  std::optional<TensorMeta> as;
  // How a collective's P pieces combine: 0 sum, 1 max, 2 min, 3 product
  // (the values of comm::ReduceOp, BoxingConf.reduce_op).
  uint8_t reduce_op = 0;
  bool move() const { return placement != to; }
};

// The logical tensor boxing `box` turns: its `as`, else its tensor's.
const TensorMeta& boxed_meta(const LogicalGraph& g, const BoxingNode& box);

// A scalar reported to the sink each step: the loss or a metric.
struct Reported {
  std::string name;    // "loss" or the metric's name
  std::string tensor;
  int boxing = -1;     // set by boxing insertion: a split scalar is gathered first
};

// The output tensor names of an op named `op` with `count` outputs: the op's
// own name for one, "op:0", "op:1", ... for more.
std::vector<std::string> op_output_names(const std::string& op, int count);

struct LogicalGraph {
  std::string job_name;
  Mode mode = Mode::kTrain;
  Cluster cluster;
  int64_t global_batch = 0;  // rows per step
  int64_t micro_batches = 1;  // per step (train plans); tensor shapes have micro_batch() rows
  int64_t micro_batch() const { return global_batch / micro_batches; }
  graph::Schedule schedule = graph::Schedule::k1f1b;  // train.schedule
  bool allow_tf32 = false;        // train.allow_tf32
  bool reuse_memory = true;       // train.reuse_memory
  bool cuda_graphs = true;        // train.cuda_graphs
  bool nccl = false;              // train.nccl: P -> B of cuda placements as device collectives
  int stages = 1;  // pipeline stages of the forward pass (mark_stages)
  // train.view "mirrored" (train plans): every device a rank with its own
  // global_batch / devices rows; tasks see their own pieces as the whole
  // tensors, the loss is the mean of the ranks' losses.
  bool mirrored = false;
  // Why causal ring attentions keep the sequence in its natural order, their
  // work unbalanced (compiler/ring_balance.h); "": balanced, or no ring.
  std::string natural_order_because;
  // Parameter servers (compiler/pserver.h): partial sums moving to another
  // placement are added up by the reader (a pserver adds the trainers'
  // gradients), not settled among their makers first.
  bool sum_moved_partials = false;
  // Async parameter servers: a block's gradient is not summed but applied
  // trainer by trainer (lanes, compiler/pserver.h); DC-ASGD's lambda (0: off).
  bool async_pserver = false;
  float dc_asgd_lambda = 0;
  // Parameter servers: how many threads of its own each pserver (a node
  // holding variable blocks) gives to the trainers' gradient sends, their
  // gets of the updated blocks and lookup-table prefetches
  // (distributed.rpc_*_thread_num; compiler/physical.cc).
  int rpc_send_threads = 1, rpc_get_threads = 1, rpc_prefetch_threads = 1;
  bool shuffle = true;    // sources shuffle each epoch (never in eval plans)
  uint64_t seed = 0;      // the shuffle's seed
  int64_t log_every = 0;
  std::vector<graph::Dataset> datasets;  // those the inputs read, in job order
  std::vector<InputNode> inputs;
  std::vector<VariableNode> variables;
  std::vector<OpNode> ops;
  std::set<std::string> op_names;
  std::map<std::string, LogicalTensor> tensors;
  std::string loss;  // empty in eval plans of jobs without one
  // Loss scaling (compiler/gradient_norm.h): the state variable ("": off),
  // the first scale and the window; `loss_scale` the scale tensor autograd
  // starts the loss's gradient at.
  std::string loss_scale_state;
  double loss_scale_initial = 0;
  int64_t loss_scale_window = 0;
  std::string loss_scale;
  std::vector<Reported> reported;
  std::vector<Reported> fetched;  // train plans: tensors the sink reads whole (name = tensor), made B first
  std::vector<BoxingNode> boxings;

  bool two_d = false;  // some SBP hint differs between its axes: deduction tries 2-D signatures
  // Where ops, inputs and variables run; [0] is the job's devices (every
  // device of the cluster), the rest as the job places them, each once.
  std::vector<graph::Placement> placements;
  // The index of `p` in placements, added if new.
  int place(const graph::Placement& p);
  const graph::Placement& placement(int index) const { return placements[static_cast<size_t>(index)]; }
  const LogicalTensor* find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
  LogicalTensor* find(const std::string& name) {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
  bool has_name(const std::string& name) const;  // a tensor or an op of that name
  // An op name made from `base` that is free together with its output names
  // (op_output_names): `base`, else base_1, base_2, ...
  std::string free_op_name(const std::string& base, int num_outputs) const;
  // Infers `op`'s outputs, registers them as tensors and appends the op.
  // Errors name the op; output names must be new. `outputs`: their metas,
  // when the caller has inferred them.
  Status append_op(OpNode op, const std::vector<TensorMeta>* outputs = nullptr);
  // Drops the ops, inputs and variables no root depends on (roots: tensor
  // names), keeping the order of what stays. Run before boxing insertion.
  void prune(const std::vector<std::string>& roots);
};

}  // namespace rill::compiler
