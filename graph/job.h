// graph::Job: the logical training job, as the user wrote it (from a job file
// or from rill::JobBuilder): datasets, inputs, variables, ops, the loss, the
// optimizer, and the run configuration. A plain value; the compiler reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/job_modes.h"
#include "graph/placement.h"
#include "kernels/attrs.h"
#include "kernels/data/dataset_spec.h"
#include "kernels/tensor.h"

namespace rill::graph {

using InlineTensor = rill::InlineTensor;
using Dataset = rill::DatasetSpec;

// A named input tensor: one field of a dataset, batched on axis 0.
struct Input {
  std::string name;
  std::string dataset;
  std::string field;
  Shape shape;                // per sample (the batch axis is added)
  DType dtype = DType::kF32;
  std::optional<NdSbp> sbp;   // default S(0)
  std::optional<Placement> placement;  // default: its group's, else the job's devices
  // The axis (of [batch, shape...]) whose index is a place in the sequence
  // (tokens' and targets' 1): a balanced ring puts it in the zigzag order
  // (compiler/ring_balance.h).
  std::optional<int64_t> sequence_axis;
  bool operator==(const Input&) const = default;
};

struct Initializer {
  std::string type = "fill";  // an initializer op: fill, uniform, normal, xavier_uniform, ...
  Attrs attrs;
  bool operator==(const Initializer&) const = default;
};

// A variable made by the parameter-server transpile (compiler/pserver.h):
// rows [row_offset, row_offset + its rows) of variable `whole` (shape
// `whole_shape`), initialized, saved and restored as those rows of it.
struct BlockOf {
  std::string whole;
  Shape whole_shape;
  int64_t row_offset = 0;
  bool operator==(const BlockOf&) const = default;
};

struct Variable {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  Initializer init;
  std::optional<NdSbp> sbp;   // default B
  bool trainable = true;
  std::optional<Placement> placement;  // default: its group's, else the job's devices
  std::optional<BlockOf> block_of;     // set by the compiler only (never in a job file)
  std::optional<int64_t> sequence_axis;  // as Input's: a position table's rows are places (axis 0)
  bool operator==(const Variable&) const = default;
};

struct Op {
  std::string name;
  std::string type;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  Attrs attrs;
  std::vector<std::optional<NdSbp>> output_sbp;  // hints, per output (may be empty)
  std::optional<Placement> placement;  // default: its group's, else the job's devices
  // Activation recompute: ops naming one group (a repeated block's layer:
  // "<block>.<i>") have the values their backward reads made again in the
  // backward, from the group's inputs, once the gradient of the group's
  // output has come (compiler/autograd.cc), instead of kept from the
  // forward. "": none.
  std::string recompute;
  bool operator==(const Op&) const = default;
};

// Ops, inputs and variables (by name) that share one placement.
struct Group {
  std::string name;
  Placement placement;
  std::vector<std::string> members;
  bool operator==(const Group&) const = default;
};

// Pipeline parallelism (docs/LAYOUTS.md, Pipelines): the stages as groups
// in order, or a number of stages the compiler cuts the ops into.
struct Pipeline {
  std::vector<std::string> stages;  // group names, first stage first
  int64_t num_stages = 0;           // > 0: cut by the compiler instead (stages empty)
  std::string balance = "params";   // with num_stages: "params" | "flops"
  bool operator==(const Pipeline&) const = default;
};

struct Optimizer {
  std::string type = "sgd";  // "sgd" | "momentum" | "adam" | "adamw" (decoupled weight decay)
  double lr = 0.01;
  double momentum = 0.9;     // momentum
  double beta1 = 0.9;        // adam
  double beta2 = 0.999;      // adam
  double epsilon = 1e-8;     // adam
  double weight_decay = 0.0;
  std::vector<std::string> no_decay;  // glob patterns: variables that take no weight decay
  double clip_grad_norm = 0.0;  // > 0: gradients scaled so their global L2 norm is at most this
  // The schedule of lr (kernels/ops/lr_schedule.h): linear warmup over
  // warmup_steps, then a cosine down to min_lr at decay_steps (0: no decay).
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;
  double min_lr = 0.0;
  bool operator==(const Optimizer&) const = default;
};

// The most steps a job may run (about 1.1e12: years at a microsecond a step).
// Larger counts, given or derived from epochs, are refused before anything runs.
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;

// The most threads a pserver gives to each of the trainers' sends, gets and
// prefetches (distributed.rpc_*_thread_num).
inline constexpr int64_t kMaxRpcThreads = 64;

struct TrainConfig {
  int64_t steps = 0;          // if 0, derived from epochs
  int64_t epochs = 0;
  int64_t batch_size = 1;     // global batch
  int64_t log_every = 100;
  uint64_t seed = 0;          // data shuffling
  bool shuffle = true;
  std::string devices = "cpu:1";  // default when the command line gives none
  int64_t bucket_bytes = int64_t{25} << 20;  // gradient buckets across nodes (0: none); 25 MiB as DDP
  // The master picks a smaller bucket size from the link's measured rate
  // and the backward's length, once, as the job runs (runtime/watch/bucket_sizing.h).
  bool buckets_by_link = false;
  bool zero = false;  // trainable variables without an SBP hint are split S(0) (ZeRO)
  // Gradient accumulation: a step runs the batch as this many micro-batches
  // of batch_size / micro_batches rows, sums their gradients, then updates once.
  int64_t micro_batches = 1;
  // How micro-batches flow through pipeline stages (the slots of what a
  // stage keeps for its backward): "1f1b" holds at most the stages after it
  // plus one per stage, "gpipe" lets a stage run all of a step's forwards.
  Schedule schedule = Schedule::k1f1b;
  // Matmuls on cuda devices may round their inputs to TF32 on tensor cores
  // (10 mantissa bits: about 1e-3 relative error per product, several
  // times the speed); off, they match the CPU's float GEMMs within float
  // rounding. No effect on cpu devices.
  bool allow_tf32 = false;
  // What matmuls multiply in (compiler/autocast.h): "bf16" and "f16" cast
  // every f32 matmul's inputs to 16 bits (f32 products, f32 everything
  // else); "tf32" is allow_tf32.
  Precision precision = Precision::kF32;
  // How gradients' all-reduces across nodes travel (data parallelism):
  // kBF16 sends each f32 gradient rounded to bf16, half the bytes, the
  // rounding error kept and added to the next step's gradient.
  Compression compression = Compression::kNone;
  // kPowerSGD: each gradient matrix [n, m] (a weight's, its first axis
  // by the rest) crosses as two factors [n, r] and [m, r] of this rank r.
  int64_t compression_rank = 8;
  // Steps before this one all-reduce their gradients uncompressed and carry
  // nothing (PyTorch's start_powerSGD_iter): compression begins, its error
  // at zero, once the first steps' large gradients are past.
  int64_t compression_start_step = 0;
  // Dynamic loss scaling (compiler/gradient_norm.h), as PyTorch's GradScaler:
  // the loss's gradient starts at this scale (a power of two) and every
  // gradient is divided by it before the update; a step whose gradients
  // overflow is skipped and halves the scale, loss_scale_window steps
  // without one double it. 0: 65536 under f16, none otherwise.
  double loss_scale = 0;
  int64_t loss_scale_window = 2000;
  // Regsts that are never live at once share bytes (compiler/
  // regst_lifetimes.h), as OneFlow's enable_reuse_mem; off, every slot has
  // bytes of its own (to rule sharing out when chasing a wrong result).
  bool reuse_memory = true;
  // On cuda devices an act's kernels are captured once as a CUDA graph per
  // set of slots and replayed (actor/compute_body.cc): bitwise the same work
  // for less host time a launch.
  bool cuda_graphs = true;
  // Gradients (and every P -> B) of cuda placements are all-reduced in
  // device memory by NCCL, one task per device on its thread, in one order
  // on every rank (compiler/physical_boxing.cc); off, they cross through
  // host memory (copies to the host, the host's collectives, copies back).
  bool nccl = false;
  // "consistent" (default): the job is written for the whole cluster, its
  // batch_size the global batch. "mirrored": each device (rank) runs its own
  // copy of the model on its own batch_size rows, as DDP does; every op sees
  // only its rank's tensors (a mean is over the rank's rows), each rank's loss
  // is its own, and gradients are averaged over the ranks.
  View view = View::kConsistent;
  bool operator==(const TrainConfig&) const = default;
};

// A forward-only pass over a dataset after training (test accuracy).
struct Eval {
  std::string dataset;        // read in place of each input's dataset
  int64_t batch_size = 500;
  bool operator==(const Eval&) const = default;
};

// Text sampled by the master after training (runtime/eager/generate.h).
struct Generate {
  std::string input;          // the i32 [context] input the tokens go to
  std::string logits;         // the [batch, context, vocabulary] logits
  std::string prompt;         // "" : a newline (gpt2: the end-of-text token)
  int64_t tokens = 200;       // tokens sampled after the prompt
  // What a token is: "bytes" (each byte one, a text dataset's) or "gpt2"
  // (GPT-2's byte-pair tokens, a tokens dataset's; text/bpe.h) with its
  // vocabulary's folder, read where the job's data may be read.
  std::string tokenizer = "bytes";
  std::string vocab = "data/gpt2";
  double temperature = 1.0;   // 0: the most likely byte each time
  int64_t top_k = 0;          // 0: every byte
  int64_t seed = 1;
  bool operator==(const Generate&) const = default;
};

// Where and how often the master saves the model (docs/CHECKPOINT_FORMAT.md).
struct CheckpointConfig {
  std::string dir;        // empty: no checkpoints
  int64_t every = 0;      // save after every this many steps (0: only at the end)
  int keep = 3;           // keep the newest this many
  // A dir holding another run's steps is refused unless the run resumes;
  // true replaces them.
  bool overwrite = false;
  // How the job's f32 variables are stored: f32, or rounded to bf16 or f16
  // (a model to hand on: half the bytes); optimizer state, loss scaling's
  // state and i32 variables keep their own dtype.
  DType dtype = DType::kF32;
  bool operator==(const CheckpointConfig&) const = default;
};

struct Metric {
  std::string name;           // as printed, e.g. "accuracy"
  std::string tensor;         // a scalar tensor of the graph
  bool operator==(const Metric&) const = default;
};

// The longest rpc_deadline: a week, in ms (it becomes every wait's patience,
// and a time that far ahead is still computed without overflow).
inline constexpr int64_t kMaxRpcDeadlineMs = int64_t{7} * 24 * 3600 * 1000;

// How the job is distributed, in PaddlePaddle Fluid's terms (its
// DistributeTranspilerConfig; docs/LAYOUTS.md, Parameter servers).
// "pserver": the nodes named by `pservers` hold the trainable variables,
// sliced into blocks, and their optimizer; the other nodes are the trainers,
// computing gradients data-parallel. "collective" (alias "nccl2"): every
// node a trainer, gradients all-reduced (the default without this section).
struct Distributed {
  DistMode mode = DistMode::kPserver;
  std::vector<std::string> pservers;  // node numbers or machine-list entries (host:ctrl_port)
  int64_t trainers = 0;               // the trainers' count (0: every node not a pserver)
  bool sync_mode = true;
  bool slice_var_up = true;           // a variable in blocks over several pservers
  SplitMethod split_method = SplitMethod::kRoundRobin;  // which pserver holds a block
  int64_t min_block_size = 8192;      // elements: no block smaller (unless its variable is)
  bool enable_dc_asgd = false;        // async only: delay-compensated updates
  bool print_log = false;             // the master logs the layout
  int64_t rpc_deadline = 180000;      // ms: the longest a pserver exchange may wait (at most kMaxRpcDeadlineMs)
  // Threads of each pserver serving the trainers: their gradient sends,
  // their gets of updated blocks, lookup-table prefetches (physical.cc).
  int64_t rpc_send_thread_num = 1;
  int64_t rpc_get_thread_num = 1;
  int64_t rpc_prefetch_thread_num = 1;
  bool operator==(const Distributed&) const = default;
};

struct Job {
  std::string name = "job";
  std::vector<Dataset> datasets;
  std::vector<Input> inputs;
  std::vector<Variable> variables;
  std::vector<Op> ops;
  std::vector<Group> groups;
  std::optional<Pipeline> pipeline;
  std::string loss;           // a scalar tensor
  std::vector<Metric> metrics;
  std::vector<std::string> fetch;  // tensors whose whole (logical) value the result carries, at the last step
  Optimizer optimizer;
  TrainConfig train;
  std::optional<Eval> eval;
  std::optional<Generate> generate;
  CheckpointConfig checkpoint;
  std::optional<Distributed> distributed;
  bool operator==(const Job&) const = default;

  // distributed.mode "pserver": parameter servers (compiler/pserver.h).
  bool pserver_mode() const { return distributed && distributed->mode == DistMode::kPserver; }
  bool mirrored() const { return train.view == View::kMirrored; }
};

}  // namespace rill::graph
