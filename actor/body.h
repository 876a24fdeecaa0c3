// What each kind of actor does when it acts. The Actor (actor.h) owns the
// protocol (ready/ack/eord, slots); a body only computes, given the slots chosen
// for this act. Bodies are a closed std::variant, so a new kind fails to compile
// until every visit handles it. Each body is touched by its actor's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actor/gradient_compression.h"
#include "actor/powersgd.h"
#include "actor/run_end.h"
#include "base/status.h"
#include "comm/collectives.h"
#include "kernels/boxing_plan.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/data/batch_sampler.h"
#include "kernels/data/dataset.h"
#include "kernels/op.h"

namespace rill {

// The slots of one act: views of the readable input slots and free output slots.
struct ActIo {
  int64_t step = 0;
  std::span<const TensorView* const> inputs;
  std::span<const TensorView* const> outputs;
  int64_t micro = 0;  // which micro-batch of the step (0 without micro-batches)
  int set = 0;        // the port set acted for (a laned variable: the lane)
};

// The ports of each act (actor.h): a body reads every input and writes
// every output, unless it names sets of them, `port_sets(inputs, outputs)`,
// each act then using one set (which the actor picks among those able).
struct PortSetSpec {
  std::vector<int> inputs;
  std::vector<int> outputs;
};
// Bodies with `static constexpr bool kVersions = true` ready versions of a
// model (variables): the first with no input (`first_version`), then one
// per input read, as many as the run has steps.

// Runs one op's CPU kernel. Views and scratch are set up once; an act only
// swaps data pointers. On a GPU every read and write of its slots is on the
// device's compute stream: regsts share bytes on that ground
// (compiler/regst_lifetimes.h). There, with `graphs`, the first act with a
// given set of slots (and micro-batch index) after the body's very first
// act captures the kernel's work as a CUDA graph, and every later act with
// that set replays it: the same
// kernels with the same arguments, for one launch's host time (a cuBLAS
// GEMM's launch costs the host 14 us, a graph's 2 us). Ops whose kernels
// read the step (OpDef::reads_step), or whose work a capture cannot hold,
// launch directly.
class ComputeBody {
 public:
  // With `cuda`, runs `kernel` (the op's CUDA kernel) on that device's
  // compute stream and returns once it is enqueued: every reader of its
  // outputs is on the same device thread (a copy task stands between it and
  // anything else), so the stream, or an event for a copy, orders them.
  // `params`: `attrs` parsed for the op's kernels (parse_params).
  // `scratch`: the op's scratch (OpDef::scratch_bytes; its thread's region
  // of the node's memory plan, shared with the thread's other tasks).
  ComputeBody(const OpDef* def, Attrs attrs, OpParams params, std::vector<Shape> logical_inputs,
              std::span<std::byte> scratch, KernelFn kernel = nullptr, CudaContext* cuda = nullptr,
              std::vector<Shape> input_offsets = {}, bool graphs = false);
  Status act(const ActIo& io);

 private:
  // A captured act: the slots it read and wrote, its micro-batch index.
  struct Graph {
    std::vector<void*> buffers;
    int64_t micro = 0;
    std::unique_ptr<void, GraphFree> exec;
  };
  static constexpr size_t kMaxGraphs = 64;  // past this many sets of slots, launch directly
  Status launch(KernelContext& ctx);

  const OpDef* def_;
  KernelFn kernel_;
  CudaContext* cuda_;
  bool graphs_ = false;
  bool launched_ = false;  // the first act ran directly
  std::vector<Graph> captured_;
  std::vector<void*> buffers_;  // this act's, to look up
  Attrs attrs_;
  OpParams params_;
  std::vector<Shape> logical_inputs_;
  std::vector<Shape> input_offsets_;
  std::span<std::byte> scratch_;
  std::vector<TensorView> in_views_;
  std::vector<TensorView> out_views_;
  bool shaped_ = false;
};

// Reads this shard's rows of each global batch from an in-memory dataset.
class SourceBody {
 public:
  SourceBody(std::shared_ptr<const Dataset> dataset, std::vector<int> fields, BatchSampler sampler);
  Status act(const ActIo& io);

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int> fields_;
  BatchSampler sampler_;
  std::vector<int64_t> indices_;
};

// Owns a variable piece's optimizer: the actor initializes the model slot once
// (init) and applies one update per gradient it reads (act).
class VariableBody {
 public:
  static constexpr bool kVersions = true;
  // `update_params`: the update op's attrs parsed for its kernels
  // (parse_params); `update_inputs`: what the update reads besides the
  // model, as the task's input regsts hold it (the gradient, and under
  // loss scaling the step's gate).
  VariableBody(const OpDef* init, Attrs init_attrs, Shape logical_shape, std::vector<int64_t> offset,
               const OpDef* update, OpParams update_params, TensorMeta meta, std::vector<TensorMeta> update_inputs);
  // Fills `model` by the initializer, or with `initial_values` when not empty.
  Status init(const TensorView& model, std::span<const float> initial_values);
  bool trained() const { return update_ != nullptr; }
  // The first version is the model slot as init left it: nothing to do.
  Status first_version(const ActIo&) { return {}; }
  // inputs = the gradient (and the gate); outputs[0] = the model slot, updated in place.
  Status act(const ActIo& io);
  // Where the optimizer state lives: one zeroed tensor per state of the
  // update op (the node's memory plan: host memory, or the GPU's when the
  // variable lives there). Call before the first update.
  Status place_state(std::span<std::byte* const> tensors);
  // The optimizer state in host memory: views of it, or copies brought back
  // from the device (held until the next call of state() or release_staging()).
  StatusOr<std::vector<std::span<const float>>> state();
  // Replaces optimizer state tensor `index` (resuming from a checkpoint).
  Status load_state(int index, std::span<const float> values);
  // Places the variable on a GPU: its model slot and optimizer state are
  // device memory, and updates run the update op's CUDA kernel. Call
  // before init.
  Status use_device(CudaContext* cuda, KernelFn update_kernel);
  // The model slot's values, in host memory.
  Status read_model(const TensorView& model, std::vector<float>* out);
  // Applies one update of `model` (host or device memory, as the variable
  // lives) by `inputs` (the gradient, and the gate), the update of step `step`.
  Status update(const TensorView& model, std::span<const TensorView* const> inputs, int64_t step);
  // Reports `model` and the optimizer state to on_snapshot's function when
  // step `step` completes a checkpoint interval or the run.
  Status maybe_snapshot(const TensorView& model, int64_t step);

  // Called on the actor's thread after the update that completes step
  // `steps_done` (1-based count) when it is a multiple of `every` or the
  // run's last (`end`'s end, which a stop may lower): the model piece and
  // the optimizer state, for a checkpoint.
  using SnapshotFn = std::function<void(int64_t steps_done, std::span<const float> model,
                                        std::span<const std::span<const float>> state)>;
  void on_snapshot(SnapshotFn fn, int64_t every, const RunEnd* end) {
    snapshot_ = std::move(fn);
    every_ = every;
    run_end_ = end;
  }
  // Also after each update that completes a multiple of `every` steps, and
  // the run's last (`end`'s end, as a checkpoint's), and before the run's
  // first update (the values it starts from, after `end`'s first() steps,
  // so that a loss before the first multiple goes on from memory too): the
  // pieces a node copies to another node's memory (a replica,
  // runtime/cluster/replicator.h).
  void on_replica(SnapshotFn fn, int64_t every, const RunEnd* end) {
    replica_ = std::move(fn);
    replica_every_ = every;
    run_end_ = end;
  }
  // That copy of the values the run starts from: call before its first update.
  Status replicate_start(const TensorView& model);
  // Also after every update, and now (the values the run starts from, after
  // `steps_done` steps): the node keeps its last steps in memory
  // (runtime/node/step_keeper.h).
  Status on_every_step(SnapshotFn fn, const TensorView& model, int64_t steps_done) {
    keep_ = std::move(fn);
    return tell(keep_, model, steps_done);
  }

 private:
  // Calls `fn` with the model and optimizer state in host memory.
  Status tell(const SnapshotFn& fn, const TensorView& model, int64_t steps_done);
  const OpDef* init_;
  Attrs init_attrs_;
  Shape logical_shape_;
  std::vector<int64_t> offset_;
  const OpDef* update_;
  OpParams update_params_;
  std::vector<TensorView> state_views_;  // what the update reads: the plan's host or device memory
  CudaContext* cuda_ = nullptr;
  KernelFn update_kernel_ = nullptr;
  // On a GPU, host copies for a checkpoint, dropped once it is taken.
  std::vector<std::vector<float>> state_host_;
  std::vector<float> model_host_;
  std::vector<TensorView> update_inputs_;
  SnapshotFn snapshot_;
  SnapshotFn replica_;
  SnapshotFn keep_;
  std::vector<std::span<const float>> told_state_;  // tell()'s views of the state in host memory
  int64_t every_ = 0;
  int64_t replica_every_ = 0;
  const RunEnd* run_end_ = nullptr;  // the run's steps (on_snapshot's and on_replica's)
};

// A variable of several lanes (a pserver's block in async mode): one
// gradient input and one model output per trainer, port set `lane` being
// input `lane` and output `lane`. The variable's values live in the body; a
// lane's act applies that trainer's gradient to them and copies them into
// the trainer's model slot. `dc_lambda` > 0: delay-compensated (DC-ASGD-a):
// the gradient g becomes g + l * g * g * (w - w_sent), w_sent what the
// lane's slot still holds (what the trainer computed g at), l = dc_lambda /
// sqrt(mean square of g), elementwise, the mean square a moving average
// (decay kDcMeanSquareDecay) over every lane's gradients. Host memory only.
class LanedVariableBody {
 public:
  static constexpr bool kVersions = true;
  LanedVariableBody(VariableBody variable, int lanes, float dc_lambda);
  std::vector<PortSetSpec> port_sets(size_t inputs, size_t outputs) const;
  // Fills `model` (lane 0's slot) as VariableBody::init does, and keeps its values.
  Status init(const TensorView& model, std::span<const float> initial_values);
  // A lane's first version: the values as they are, into its slot.
  Status first_version(const ActIo& io);
  // inputs[0] = the lane's gradient; outputs[0] = the lane's model slot.
  Status act(const ActIo& io);
  Status load_state(int index, std::span<const float> values) { return variable_.load_state(index, values); }
  void on_snapshot(VariableBody::SnapshotFn fn, int64_t every, const RunEnd* end) {
    variable_.on_snapshot(std::move(fn), every, end);
  }
  void on_replica(VariableBody::SnapshotFn fn, int64_t every, const RunEnd* end) {
    variable_.on_replica(std::move(fn), every, end);
  }
  Status on_every_step(VariableBody::SnapshotFn fn, const TensorView& model, int64_t steps_done);
  // The variable's values (no slot holds them for long).
  Status read_model(const TensorView& model, std::vector<float>* out);

 private:
  VariableBody variable_;
  int lanes_;
  float dc_lambda_;
  bool updated_ = false;             // a lane has updated the values
  std::vector<float> values_;        // the variable's values
  std::vector<float> compensated_;   // DC-ASGD: the gradient compensated
  std::vector<float> mean_square_;   // DC-ASGD: of the gradients, per element
  static constexpr float kDcMeanSquareDecay = 0.95f;
};

// Turns the `parallel` pieces of a logical tensor from one SBP into another,
// moving only what the conversion needs, as collectives among the nodes:
//   P -> B   local sum, all-reduce          P -> S   local sums, reduce-scatter
//   S -> B   all-gather                     S(a) -> S(b)  all-to-all
//   B -> S   local slice (no traffic)       B -> P, S -> P  local (zeros elsewhere)
// SBPs are 2-D over [nodes, devices per node] (kernels/tensor.h NdSbp); one
// task converts what boxing_form allows: 1-D SBPs over all devices, `within`
// alone (each node between its devices, no traffic), or `across` alone, each
// device index a lane converted across nodes, every lane in one collective.
// Piece k covers piece_region(k) of the logical tensor (uneven splits: the
// first pieces one larger). This node's task reads `local_pieces` pieces,
// global ranks first_rank ... (one when they are `within` B: the node's
// first), and writes as many, or one when `within` is B (every device of
// the node reads it); with pieces on other nodes (the same number on each),
// `collectives` joins the matching boxing task of every node, its rank being
// the node's index among them. No buffer holds the whole logical tensor
// unless an output is B. f32 and i32; sums across nodes f32 only.
// Buffers are sized once, by the plan; an act allocates nothing.
class BoxingBody {
 public:
  // Runs `plan` (kernels/boxing_plan.h); `collectives` joins the matching
  // boxing task of every node when the plan exchanges (`tag`), and `op` is
  // how P pieces combine (a collective op's max, min or product; f32).
  // `scratch`: plan.scratch_bytes() bytes that outlive the body (the node's
  // memory plan), or null: the body allocates them. The collectives (one
  // per body, of default sizes) draw their own scratch from it too.
  BoxingBody(BoxingPlan plan, comm::Collectives* collectives = nullptr, uint64_t tag = 0,
             comm::ReduceOp op = comm::ReduceOp::kSum, std::byte* scratch = nullptr);
  // Shorthands for plan_boxing, plan_boxing_bucket and plan_boxing_move.
  BoxingBody(NdSbp in_sbp, NdSbp out_sbp, int parallel, TensorMeta logical, int first_rank, int local_pieces,
             comm::Collectives* collectives = nullptr, uint64_t tag = 0, int piece = -1,
             comm::ReduceOp op = comm::ReduceOp::kSum)
      : BoxingBody(plan_boxing(in_sbp, out_sbp, parallel, std::move(logical), first_rank, local_pieces, piece),
                   collectives, tag, op) {}
  BoxingBody(const std::vector<TensorMeta>& bucket, int parallel, int first_rank, int local_pieces,
             comm::Collectives* collectives, uint64_t tag)
      : BoxingBody(plan_boxing_bucket(bucket, parallel, first_rank, local_pieces), collectives, tag) {}
  BoxingBody(TensorMeta logical, const std::vector<Region>& inputs, const Region& output, bool sum = false)
      : BoxingBody(plan_boxing_move(std::move(logical), inputs, output, sum)) {}
  Status act(const ActIo& io);
  // The collective its last act called and its algorithm ("all_reduce
  // ring"), or "" when it calls none (within a node, a move).
  std::string collective() const;

  // A compressed all-reduce's state carried from step to step: this node's
  // error, and PowerSGD's Q (the same on every node); empty otherwise.
  struct Carried {
    std::span<const float> error, q;
  };
  Carried carried() const;
  // Goes on from a checkpoint's carried state, the run resuming after
  // `steps_done` steps. Invalid argument, nothing changed, when the sizes
  // are not carried()'s (another layout of the buckets, another rank).
  Status restore(std::span<const float> error, std::span<const float> q, int64_t steps_done);
  // Tells `fn` the carried state after each act that completes a multiple
  // of `every` steps (a checkpoint's step), on the boxing's thread. The
  // run's last step, which a stop may bring forward, is the node's to take
  // once the run has ended (carried() then).
  using CarriedFn = std::function<void(int64_t steps_done, Carried carried)>;
  void on_snapshot(CarriedFn fn, int64_t every) {
    snapshot_ = std::move(fn);
    every_ = every;
  }
  // Tells `fn` the carried state after every act, on the boxing's thread
  // (a live job's memory of its last steps: runtime/node/step_keeper.h).
  void on_every_step(CarriedFn fn) { every_step_ = std::move(fn); }

 private:
  using Ref = BoxingPlan::Ref;
  using Step = BoxingPlan::Step;
  using Exchange = BoxingPlan::Exchange;
  std::byte* resolve(const Ref& ref, const ActIo& io);
  void run(const std::vector<Step>& steps, const ActIo& io);
  Status exchange(const ActIo& io);

  BoxingPlan p_;
  comm::Collectives* collectives_;
  uint64_t tag_;
  comm::ReduceOp op_;
  Status setup_;                        // an error found when built, returned by every act
  std::vector<std::byte> own_scratch_;  // when no scratch was given
  // p_.compress: the all-reduce in bf16 or as PowerSGD's factors, and
  // the error carried (from step p_.compress_start on; plain before).
  std::unique_ptr<Bf16AllReduce> bf16_;
  std::unique_ptr<PowerSgdAllReduce> powersgd_;
  CarriedFn snapshot_, every_step_;
  int64_t every_ = 0;
  std::byte* send_ = nullptr;           // p_.send_bytes, then
  std::byte* recv_ = nullptr;           // p_.recv_bytes
};

// Copies its input slot to its output slot. Host to host: the two ends of a
// cross-node regst (Send on the producer's node, Recv on the consumer's; the
// bytes between them travel with the `ready` message, runtime's bus). Or
// between host and a GPU, enqueued on that GPU's copy stream, beside its
// kernels: its thread tells the host side (the producer of the slot it
// reads, the readers of the slot it writes) when the copy is complete, never
// by waiting here. Host to device, a copy into a device slot waits only for
// the work that last read that slot (an event marked when the slot came
// back), so the next step's input crosses while this step computes; device
// to host, it waits for the work enqueued before it (the slot's producer).
// Between two GPUs of the node (kDeviceToDevice, on the reader's GPU), a
// copy from the other GPU's slot, peer to peer (CudaContext::copy_peer),
// waits like a copy into the device: the slot it reads is complete, since
// its producer's thread sent the `ready` only when its work was.
// Either way the kernels enqueued after it wait for the copy.
class CopyBody {
 public:
  CopyBody() = default;
  // `src_device`: the CUDA device a kDeviceToDevice copy reads from.
  CopyBody(CudaContext* cuda, CopyKind kind, std::string name, int src_device = -1)
      : cuda_(cuda), kind_(kind), name_(std::move(name)), src_device_(src_device) {}
  Status act(const ActIo& io);
  // The output slot at `data` is back from its last reader (whose work is
  // enqueued on the compute stream by now).
  Status slot_back(const void* data);

 private:
  // Per output slot that has come back: the event marked when it last did.
  struct Freed {
    const void* data = nullptr;
    DeviceEvent event;
  };
  void* freed_event(const void* data) const;  // null: the slot never came back
  CudaContext* cuda_ = nullptr;
  CopyKind kind_ = CopyKind::kHostToDevice;
  std::string name_;
  int src_device_ = -1;
  std::vector<Freed> freed_;   // into the device (from the host or a peer)
  DeviceEvent produced_;       // device to host: the work before the copy
};

// Per-step scalars reported by the sink: one value per metric name; and the
// fetched tensors, whole, viewed in their regsts (valid during the call).
struct StepMetrics {
  int64_t step = 0;
  std::span<const std::string> names;
  std::span<const double> values;
  std::span<const std::string> fetch_names;
  std::span<const TensorView* const> fetched;
  // The mirrored view: `ranks` > 0 and rank_values[metric * ranks + rank]
  // is each rank's own value (values then hold their mean); fetch_names are
  // "tensor@rank".
  int ranks = 0;
  std::span<const double> rank_values;
};

// Collects the loss and metrics of each step; sums partial pieces (the
// mirrored view, `ranks` > 0: keeps each rank's piece and reports their
// mean). Inputs past the reported ones are the fetched tensors, one whole
// piece each.
class SinkBody {
 public:
  using Listener = std::function<void(const StepMetrics&)>;
  // With `micro_batches` K > 1 it acts once per micro-batch and reports once
  // a step: each metric's mean over the K micro-batches (each a mean over
  // as many rows, so the mean over the batch), fetched tensors as the last
  // micro-batch sees them.
  SinkBody(std::vector<std::string> input_names, std::vector<bool> partial, Listener listener,
           std::vector<std::string> fetch = {}, int64_t micro_batches = 1, int ranks = 0);
  Status act(const ActIo& io);

 private:
  std::vector<int> metric_of_input_;
  std::vector<bool> partial_;
  std::vector<bool> first_piece_;
  std::vector<std::string> names_;
  std::vector<double> values_;
  std::vector<double> sums_;  // over the step's micro-batches so far
  int ranks_ = 0;
  std::vector<int> rank_of_input_;    // ranks_ > 0: each reported input's rank
  std::vector<double> rank_values_;   // [metric * ranks_ + rank]
  std::vector<double> rank_sums_;     // the same, over the step's micro-batches so far
  int loss_metric_ = -1;  // index in names_ of "loss", checked for finiteness
  Listener listener_;
  std::vector<std::string> fetch_;
  int64_t micro_batches_;
};

}  // namespace rill
