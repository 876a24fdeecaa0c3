// OpDef: everything Rill knows about one op type, in one value: arity, shape and
// dtype inference, SBP signatures, gradient rule, CPU kernel, the name of its
// CUDA kernel, and how its attributes are parsed for those kernels. Op types
// are listed explicitly in kernels/registry.cc (no static registration).
//
// Threading: OpDefs are immutable globals; any thread may read them. A kernel
// runs on its actor's thread only and must not allocate in steady state
// (scratch memory comes from KernelContext::scratch, sized by OpDef::scratch_bytes).
#pragma once

#include <array>
#include <memory>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/attrs.h"
#include "kernels/tensor.h"

namespace rill {

class CudaContext;  // kernels/cuda/cuda_context.h: a device's stream, cuBLAS handle and memory

// An op's attributes as its kernels read them (kernels/ops/op_params.h):
// parsed once, when its task is built (OpDef::parse), so that an act reads
// fields rather than looking attributes up by name.
using OpParams = std::shared_ptr<const void>;

// One valid combination of input and output SBPs for an op.
struct SbpSignature {
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
  bool operator==(const SbpSignature&) const = default;
};

// What a kernel sees when it acts. Views point into regst memory owned by the
// runtime. `logical_inputs` are the shapes of the logical (whole) tensors,
// needed by ops whose result depends on the global size (reduce_mean over a
// split axis divides by the logical count, not the local one).
struct KernelContext {
  std::span<TensorView> inputs;
  std::span<TensorView> outputs;
  // Optimizer state tensors (momentum, Adam's m and v), each shaped like input 0.
  std::span<TensorView> state;
  std::span<const Shape> logical_inputs;
  // Where each input piece lies in its logical tensor (one entry per axis;
  // empty: at the origin). Ops whose values depend on an element's place in
  // the whole tensor (dropout's mask) read it, so pieces agree with one
  // device's result however the tensor is split.
  std::span<const Shape> input_offsets;
  // For initializers: the logical shape of output 0 and the offset of this
  // piece in it (one entry per axis), so a split variable's pieces together
  // equal the logical tensor a single device would have made.
  Shape logical_output;
  std::vector<int64_t> output_offset;
  const Attrs* attrs = nullptr;  // initializers read these; other kernels their params
  const void* params = nullptr;   // OpDef::parse's result (params_of<T>, kernels/ops/op_params.h)
  int64_t step = 0;  // 0-based index of the current step (Adam: t = step + 1)
  int64_t micro = 0;  // which micro-batch of the step (train.micro_batches; 0 without)
  std::span<std::byte> scratch;
  // CUDA kernels only: views point into that device's memory, and the kernel
  // enqueues its work on cuda->stream without waiting for it.
  CudaContext* cuda = nullptr;
};

// The compiler's autograd hands a GradBuilder to an op's gradient rule. Tensors
// are named by strings; the rule adds ops and declares input gradients.
class GradBuilder {
 public:
  virtual ~GradBuilder() = default;
  virtual const Attrs& attrs() const = 0;
  virtual int num_inputs() const = 0;
  virtual const std::string& input(int i) const = 0;   // forward input name
  virtual const std::string& output(int i) const = 0;  // forward output name
  virtual const TensorMeta& meta(const std::string& tensor) const = 0;
  // Gradient flowing into forward output i, or "" if nothing depends on it.
  virtual std::string output_grad(int i) const = 0;
  // False for inputs that need no gradient (data, labels): skip work for them.
  virtual bool needs_input_grad(int i) const = 0;
  // Adds an op to the backward graph; returns the names of its outputs.
  virtual std::vector<std::string> add_op(const std::string& type, std::vector<std::string> inputs,
                                          Attrs attrs = {}, int num_outputs = 1) = 0;
  virtual void set_input_grad(int i, const std::string& grad) = 0;
};

using InferFn = Status (*)(const Attrs& attrs, std::span<const TensorMeta> inputs,
                           std::vector<TensorMeta>* outputs);
using SbpFn = std::vector<SbpSignature> (*)(const Attrs& attrs, std::span<const TensorMeta> inputs);
using GradFn = Status (*)(GradBuilder& builder);
using KernelFn = Status (*)(KernelContext& ctx);
using ScratchFn = size_t (*)(const Attrs& attrs, std::span<const TensorMeta> physical_inputs);
using ParseFn = StatusOr<OpParams> (*)(const Attrs& attrs);
using IndexBoundFn = int64_t (*)(const Attrs& attrs, std::span<const TensorMeta> logical_inputs, int input);

enum class OpRole : uint8_t {
  kCompute,      // a forward or backward op
  kInitializer,  // no inputs; fills output 0 once (variables)
  kUpdate,       // optimizer: updates input 0 (the variable) in place from input 1 (its gradient; input 2, a gate, under loss scaling)
  kCollective,   // the mirrored view's collectives: the compiler exchanges the ranks' pieces, the kernel finishes
};

struct OpDef {
  const char* type = "";
  int num_inputs = 1;  // -1: one or more
  int num_outputs = 1;
  OpRole role = OpRole::kCompute;
  InferFn infer = nullptr;
  SbpFn sbp = nullptr;
  // Signatures its kernel alone cannot do, each device's piece needing the
  // others' (ring attention: every query piece against every piece of the
  // keys), offered to SBP deduction beside `sbp`'s. The compiler makes such
  // an op one op per step of a ring of the devices, each reading the piece
  // of a device further back (compiler/ring_expansion.h); no kernel ever
  // acts with one.
  SbpFn ring_sbp = nullptr;
  GradFn grad = nullptr;  // nullptr: not differentiable
  KernelFn cpu = nullptr;
  // Its CUDA kernel: the name the CUDA module exports it under
  // (RILL_CUDA_KERNEL(name) in kernels/ops/*_cuda.cc, beside its .cu), found
  // when the module loads; nullptr for initializers, which run on the host
  // so that a variable starts bitwise alike on every device type. Every
  // other op names one (checked in every build: tests/kernels/ops_math_test.cc).
  const char* cuda = nullptr;
  int num_state = 0;  // kUpdate: optimizer state tensors shaped like the variable
  // kUpdate: the state tensors' names, as checkpoints store them ("<variable>/<name>").
  std::array<const char*, 2> state_names = {nullptr, nullptr};
  ScratchFn scratch_bytes = nullptr;  // its CPU kernel's scratch (nullptr: none; CUDA kernels take none)
  ParseFn parse = nullptr;            // nullptr: its kernels read no attributes
  // The kernel copies input 0's bytes as they lie into output 0 (reshape):
  // a split of one is the split of the other only where every device's
  // pieces hold as many elements, which SBP deduction checks per placement.
  bool copies_bytes = false;
  // Inputs holding indices (embedding ids, class labels): the bound their
  // values must lie under ([0, bound)) for input `input`, or 0 where that
  // input is not an index. A source checks the data it reads against the
  // bounds of the ops reading it before the first step, naming the value
  // and where it lies in the data (runtime/node/node_bodies.cc).
  IndexBoundFn index_bound = nullptr;
  // Training only (dropout): eval plans and eager forward runs (generation)
  // run it as identity.
  bool identity_in_eval = false;
  // Reads attr `seed` (default 0): a repeated block's layers get seeds
  // apart (graph/job_blocks.cc), written or not, as variables' initializers do.
  bool seeded = false;
  // Its kernels read KernelContext::step (dropout's mask is new each step),
  // so its work on a GPU is never replayed from a captured graph
  // (actor/compute_body.cc), which would repeat the first step's.
  bool reads_step = false;
};

// The op with this type, or nullptr.
const OpDef* find_op(std::string_view type);
// Every op type, in a fixed order.
std::span<const OpDef* const> all_ops();

// `attrs` parsed for `def`'s kernels (null params where it reads none);
// errors name the op type.
StatusOr<OpParams> parse_params(const OpDef& def, const Attrs& attrs);

// Runs `def.infer`, first checking the number of inputs; errors name the op type.
Status infer_op(const OpDef& def, const Attrs& attrs, std::span<const TensorMeta> inputs,
                std::vector<TensorMeta>* outputs);

}  // namespace rill
