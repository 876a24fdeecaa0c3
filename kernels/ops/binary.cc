// add, sub, mul: elementwise y = x0 (op) x1 over two f32 tensors of the same
// shape. x1 may also be a scalar ([] or [1]) broadcast over x0; its gradient
// is then the sum of the elementwise one.
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

enum class BinaryKind { kAdd, kSub, kMul };

Status infer_binary(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("inputs must be f32, got {} and {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  if (in[0].shape != in[1].shape && !math::is_scalar_shape(in[1].shape))
    return invalid_argument("x0 {} and x1 {} must have the same shape, or x1 must be a scalar",
                            shape_string(in[0].shape), shape_string(in[1].shape));
  out->push_back({in[0].shape, DType::kF32});
  return {};
}

template <BinaryKind kKind>
std::vector<SbpSignature> sbp_binary(const Attrs&, std::span<const TensorMeta> in) {
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  const int rank = static_cast<int>(in[0].shape.size());
  std::vector<SbpSignature> sigs;
  if (in[0].shape == in[1].shape) {
    sigs = math::split_or_broadcast(rank, 2);
  } else {  // scalar x1: it stays whole on every device
    for (int i = 0; i < rank; ++i) sigs.push_back({{Sbp::split(i), B}, {Sbp::split(i)}});
    sigs.push_back(math::uniform_signature(B, 2));
  }
  if (kKind == BinaryKind::kMul) {
    sigs.push_back({{P, B}, {P}});
    sigs.push_back({{B, P}, {P}});
  } else {
    sigs.push_back(math::uniform_signature(P, 2));
  }
  return sigs;
}

// Shapes x1's gradient: the elementwise one, summed when x1 is broadcast.
std::string fit_to_input1(GradBuilder& g, const std::string& grad) {
  if (g.meta(g.input(1)).shape == g.meta(g.input(0)).shape) return grad;
  return math::sum_to_scalar_like(g, grad, g.input(1));
}

template <BinaryKind kKind>
Status grad_binary(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty()) return {};
  if (g.needs_input_grad(0)) {
    if (kKind == BinaryKind::kMul) g.set_input_grad(0, g.add_op("mul", {dy, g.input(1)})[0]);
    else g.set_input_grad(0, dy);
  }
  if (g.needs_input_grad(1)) {
    std::string d1 = dy;
    if (kKind == BinaryKind::kMul) d1 = g.add_op("mul", {dy, g.input(0)})[0];
    if (kKind == BinaryKind::kSub) d1 = g.add_op("scale", {dy}, {{"scale", -1.0}})[0];
    g.set_input_grad(1, fit_to_input1(g, d1));
  }
  return {};
}

template <BinaryKind kKind>
inline float apply(float a, float b) {
  if constexpr (kKind == BinaryKind::kAdd) return a + b;
  else if constexpr (kKind == BinaryKind::kSub) return a - b;
  else return a * b;
}

template <BinaryKind kKind>
Status cpu_binary(KernelContext& ctx) {
  const float* __restrict a = ctx.inputs[0].f32();
  const float* __restrict b = ctx.inputs[1].f32();
  float* __restrict y = ctx.outputs[0].f32();
  const int64_t n = ctx.outputs[0].size();
  if (ctx.inputs[1].size() == n && ctx.inputs[1].shape == ctx.inputs[0].shape) {
    for (int64_t i = 0; i < n; ++i) y[i] = apply<kKind>(a[i], b[i]);
  } else {
    const float s = b[0];
    for (int64_t i = 0; i < n; ++i) y[i] = apply<kKind>(a[i], s);
  }
  return {};
}

template <BinaryKind kKind>
constexpr OpDef binary_op(const char* type) {
  return OpDef{
      .type = type,
      .num_inputs = 2,
      .num_outputs = 1,
      .infer = infer_binary,
      .sbp = sbp_binary<kKind>,
      .grad = grad_binary<kKind>,
      .cpu = cpu_binary<kKind>,
      .cuda = type,
  };
}

}  // namespace

const OpDef kAddOp = binary_op<BinaryKind::kAdd>("add");
const OpDef kSubOp = binary_op<BinaryKind::kSub>("sub");
const OpDef kMulOp = binary_op<BinaryKind::kMul>("mul");

}  // namespace rill
