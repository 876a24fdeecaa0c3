// Eager op execution and finite-difference gradient checks for op tests.
//
// `run_op` runs one op's CPU kernel on host tensors the way an actor would
// (infer, allocate outputs and scratch, call the kernel), with every logical
// shape equal to the physical one unless RunOptions says otherwise.
// `EagerGradBuilder` runs an op's gradient rule by executing each op the rule
// adds at once. `check_gradients` compares the rule's input gradients with
// central finite differences.
//
// Test-only code; single-threaded use (one test at a time per object).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/attrs.h"
#include "kernels/op.h"
#include "kernels/tensor.h"

namespace rill::testing {

// A host tensor that owns its data: `f32` for DType::kF32, `i32` for kI32,
// `h16` (bit patterns) for bf16 and f16.
struct Tensor {
  Shape shape;
  DType dtype = DType::kF32;
  std::vector<float> f32;
  std::vector<int32_t> i32;
  std::vector<uint16_t> h16;

  static Tensor floats(Shape shape, std::vector<float> values);
  static Tensor ints(Shape shape, std::vector<int32_t> values);
  // A bf16 or f16 tensor of `values`, each rounded to the nearest.
  static Tensor halves(Shape shape, DType dtype, const std::vector<float>& values);
  // Every element as float (a float tensor's).
  std::vector<float> as_floats() const;
  static Tensor zeros(Shape shape, DType dtype = DType::kF32);
  // Uniform in [low, high), deterministic for a seed.
  static Tensor uniform(Shape shape, uint64_t seed, float low = -1.0f, float high = 1.0f);

  int64_t size() const { return num_elements(shape); }
  TensorMeta meta() const { return {shape, dtype}; }
  TensorView view();  // points into this tensor's storage
};

struct RunOptions {
  // Logical shape of each input; empty means "the same as the physical shape".
  std::vector<Shape> logical_inputs;
  // Where each input piece lies in its logical tensor; empty: at the origin.
  std::vector<Shape> input_offsets;
  // Initializers: logical shape of output 0 and this piece's offset in it.
  Shape logical_output;
  std::vector<int64_t> output_offset;
  int64_t step = 0;
  int micro = 0;  // the micro-batch of the step (ops that accumulate over them)
  // When set, the outputs start as these tensors (an accumulating op's
  // earlier micro-batches) and are returned updated.
  const std::vector<Tensor>* outputs = nullptr;
  // Optimizer state tensors (OpDef::num_state of them), updated in place.
  std::vector<Tensor>* state = nullptr;
};

// Runs `def` on `inputs`, which the kernel may update in place (kUpdate ops).
// Output buffers start as NaN (i32: a sentinel) and scratch as garbage, so a
// kernel that leaves part of an output unwritten or trusts scratch fails tests.
StatusOr<std::vector<Tensor>> run_kernel(const OpDef& def, std::span<Tensor> inputs, const Attrs& attrs,
                                         const RunOptions& options = {});

// Looks up `type` and runs it on copies of `inputs`.
StatusOr<std::vector<Tensor>> run_op(const std::string& type, std::vector<Tensor> inputs,
                                     const Attrs& attrs = {}, const RunOptions& options = {});

// A GradBuilder over named host tensors: the forward op's inputs are "in0",
// "in1", ..., its outputs "out0", ..., the cotangents "dout0", ...; each op
// the rule adds runs at once and its outputs are named "t0", "t1", ...
// A failing added op is recorded in status() (add_op then returns names that
// no tensor has, so later ops fail too); a gradient rule cannot see it.
class EagerGradBuilder : public GradBuilder {
 public:
  // `needs_grad[i]` says whether input i wants a gradient; an empty
  // `output_grads[i]` means nothing depends on output i.
  EagerGradBuilder(const std::string& type, const Attrs& attrs, std::vector<Tensor> inputs,
                   std::vector<Tensor> outputs, std::vector<std::optional<Tensor>> output_grads,
                   std::vector<bool> needs_grad);

  const Attrs& attrs() const override { return attrs_; }
  int num_inputs() const override { return static_cast<int>(input_names_.size()); }
  const std::string& input(int i) const override { return input_names_.at(i); }
  const std::string& output(int i) const override { return output_names_.at(i); }
  const TensorMeta& meta(const std::string& tensor) const override;
  std::string output_grad(int i) const override;
  bool needs_input_grad(int i) const override { return needs_grad_.at(i); }
  std::vector<std::string> add_op(const std::string& type, std::vector<std::string> inputs, Attrs attrs = {},
                                  int num_outputs = 1) override;
  void set_input_grad(int i, const std::string& grad) override;

  const Status& status() const { return status_; }
  // The gradient set for input i, or nullptr if the rule set none.
  const Tensor* input_grad(int i) const;
  const Tensor* tensor(const std::string& name) const;
  // Types of the ops the rule added, in order.
  const std::vector<std::string>& added_ops() const { return added_ops_; }

 private:
  std::string type_;
  Attrs attrs_;
  std::vector<std::string> input_names_, output_names_, output_grad_names_;
  std::vector<bool> needs_grad_;
  std::map<std::string, Tensor> tensors_;
  mutable std::map<std::string, TensorMeta> metas_;
  std::map<int, std::string> input_grads_;
  std::vector<std::string> added_ops_;
  int next_id_ = 0;
  mutable Status status_;
};

// An element agrees when |analytic - numeric| <= abs_tolerance + tolerance *
// |numeric|.
//
// What the defaults catch: a rule 5% off wherever its gradients reach 0.03
// (the bound there is 1.3e-3), e.g. a softmax over rows of 16 5% off, a
// mean over 12 divided by 11, gelu_tanh without its cubic term's
// derivative (tests/kernels/grad_check_test.cc). The former default, 0.01
// absolute under gradients of 1, let the first two pass.
//
// Why a correct rule passes them on any CPU (CPUs differ in the order and
// fusing of the kernels' roundings, cpu_clones.h, not in their size), at
// the op tests' sizes: inputs of magnitude 3 or less, cotangents in
// [-1, 1), a probe moving at most 20 outputs (one of attention's k). The
// difference quotient is off from the derivative by
//  - truncation, eps^2 / 6 * |L'''| = 1.7e-5 * |L'''| at eps 1e-2, where
//    the ops are smooth (relu's inputs stay 0.2 from its kink) and L''' sums
//    the moved outputs' third derivatives, 2 or less each (tanh's at 0)
//    and mostly far less: about 1e-4;
//  - rounding: outputs the probe does not move are bitwise equal in both
//    runs and cancel; a moved one is a float result of at most a few dozen
//    roundings of values of 3 or less (layer_norm's mean and variance over
//    6 are the deepest), each at most half an ulp (1.2e-7 at 3) and falling
//    either way, so they add up as a random walk to about 1e-6; the
//    quotient divides the two runs' difference by 2 * eps = 0.02: 1e-4 per
//    moved output, and m of them add up the same way: sqrt(20) * 1e-4 =
//    4.5e-4 for the most;
// and the rule's own float rounding is about 1e-6. Together about 5e-4:
// half of abs_tolerance, and ten times the largest disagreement any op test
// shows (4.5e-5, layer_norm; 2.3e-4 at eps 1e-3). At eps 1e-3 the rounding
// term is ten times larger, so the step is not smaller.
struct GradCheckOptions {
  double eps = 1e-2;            // finite-difference step
  double tolerance = 1e-2;      // relative, on |numeric|
  double abs_tolerance = 1e-3;  // absolute: what decides for gradients under 0.1
  uint64_t seed = 7;        // for the random output cotangents
  int max_reported = 8;     // mismatches listed in the error message
  // Outputs from this index on get no cotangent: values the gradient reads
  // but nothing differentiates (layer_norm's saved mean and rstd).
  int differentiable_outputs = 1 << 30;
};

// Checks the gradient rule of `type` for the inputs listed in `which_inputs`
// (f32 inputs only) against central differences of
// L = sum_k sum(out_k * cotangent_k), with random cotangents in [-1, 1).
// Returns OK, or an error naming the op, input index and element index of
// each mismatch (up to max_reported), or why the check could not run.
Status check_gradients(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs,
                       const std::vector<int>& which_inputs, const GradCheckOptions& options = {});
// Same with `tolerance` as both the relative and the absolute tolerance.
Status check_gradients(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs,
                       const std::vector<int>& which_inputs, double tolerance);
// check_gradients with `rule` in place of the op's own gradient rule (the
// forward run is still the op's): how a test shows that a wrong rule is
// caught.
Status check_gradient_rule(const std::string& type, GradFn rule, const std::vector<Tensor>& inputs,
                           const Attrs& attrs, const std::vector<int>& which_inputs,
                           const GradCheckOptions& options = {});

}  // namespace rill::testing
