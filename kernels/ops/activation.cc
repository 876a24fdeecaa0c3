// relu, gelu (erf form), gelu_tanh (GPT-2's tanh form, PyTorch's
// approximate='tanh'), tanh, sigmoid and their gradient ops. Each gradient
// op takes (t, dy) and returns dx: relu/tanh/sigmoid take the forward output
// y as t, the gelus take the forward input x. The forward ops are not linear, so
// they have no partial-sum signature; the gradient ops are linear in dy.
#include <cmath>

#include "kernels/ops/activation_math.h"
#include "kernels/ops/cpu_clones.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

using act::Act;
using act::backward;
using act::forward;

Status infer_unary(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in[0].dtype != DType::kF32) return invalid_argument("x must be f32, got {}", dtype_name(in[0].dtype));
  out->push_back(in[0]);
  return {};
}

Status infer_unary_grad(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("inputs must be f32, got {} and {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  if (in[0].shape != in[1].shape)
    return invalid_argument("forward tensor {} and dy {} must have the same shape", shape_string(in[0].shape),
                            shape_string(in[1].shape));
  out->push_back(in[1]);
  return {};
}

std::vector<SbpSignature> sbp_unary(const Attrs&, std::span<const TensorMeta> in) {
  return math::split_or_broadcast(static_cast<int>(in[0].shape.size()), 1);
}

std::vector<SbpSignature> sbp_unary_grad(const Attrs&, std::span<const TensorMeta> in) {
  auto sigs = math::split_or_broadcast(static_cast<int>(in[0].shape.size()), 2);
  sigs.push_back({{Sbp::broadcast(), Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return sigs;
}

template <Act kAct>
Status grad_unary(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty() || !g.needs_input_grad(0)) return {};
  static constexpr const char* kGradType[] = {"relu_grad", "gelu_grad", "tanh_grad", "sigmoid_grad",
                                              "gelu_tanh_grad"};
  const std::string& t = kAct == Act::kGelu || kAct == Act::kGeluTanh ? g.input(0) : g.output(0);
  g.set_input_grad(0, g.add_op(kGradType[static_cast<int>(kAct)], {t, dy})[0]);
  return {};
}

// The loops, each run through the copy for this CPU (cpu_clones.h).
template <Act kAct>
void forward_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = forward<kAct>(x[i]);
}

template <Act kAct>
void backward_loop(const float* __restrict t, const float* __restrict dy, float* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = backward<kAct>(t[i], dy[i]);
}

template <Act kAct>
Status cpu_unary(KernelContext& ctx) {
  cpu_clones::run<forward_loop<kAct>>(ctx.inputs[0].f32(), ctx.outputs[0].f32(), ctx.outputs[0].size());
  return {};
}

template <Act kAct>
Status cpu_unary_grad(KernelContext& ctx) {
  cpu_clones::run<backward_loop<kAct>>(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(),
                                       ctx.outputs[0].size());
  return {};
}

template <Act kAct>
constexpr OpDef unary_op(const char* type) {
  return OpDef{.type = type, .num_inputs = 1, .num_outputs = 1, .infer = infer_unary, .sbp = sbp_unary,
               .grad = grad_unary<kAct>, .cpu = cpu_unary<kAct>, .cuda = type};
}

template <Act kAct>
constexpr OpDef unary_grad_op(const char* type) {
  return OpDef{.type = type, .num_inputs = 2, .num_outputs = 1, .infer = infer_unary_grad,
               .sbp = sbp_unary_grad, .cpu = cpu_unary_grad<kAct>, .cuda = type};
}

}  // namespace

const OpDef kReluOp = unary_op<Act::kRelu>("relu");
const OpDef kGeluOp = unary_op<Act::kGelu>("gelu");
const OpDef kGeluTanhOp = unary_op<Act::kGeluTanh>("gelu_tanh");
const OpDef kTanhOp = unary_op<Act::kTanh>("tanh");
const OpDef kSigmoidOp = unary_op<Act::kSigmoid>("sigmoid");
const OpDef kReluGradOp = unary_grad_op<Act::kRelu>("relu_grad");
const OpDef kGeluGradOp = unary_grad_op<Act::kGelu>("gelu_grad");
const OpDef kGeluTanhGradOp = unary_grad_op<Act::kGeluTanh>("gelu_tanh_grad");
const OpDef kTanhGradOp = unary_grad_op<Act::kTanh>("tanh_grad");
const OpDef kSigmoidGradOp = unary_grad_op<Act::kSigmoid>("sigmoid_grad");

}  // namespace rill
