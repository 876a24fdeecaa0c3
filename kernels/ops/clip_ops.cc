// The ops of gradient clipping by the global norm (compiler/gradient_norm.cc):
//   sum_squares(x) -> [] f32: the sum of x's squares (in double). A split x
//     gives partial sums (S -> P); P in is not allowed (a square of a sum).
//   add_n(x0, x1, ...) -> the elementwise sum of one or more tensors of one
//     shape: all P, all B or all split alike.
//   clip_factor(total) -> (factor, norm), both []: norm = sqrt(total),
//     factor = min(1, max_norm / (norm + 1e-6)) (float attr max_norm > 0),
//     PyTorch's clip_grad_norm_ rule; every gradient is then multiplied by
//     factor before its update.
#include <cmath>

#include "kernels/ops/attr_read.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status infer_sum_squares(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in[0].dtype != DType::kF32) return invalid_argument("x must be f32, got {}", dtype_name(in[0].dtype));
  out->push_back({{}, DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_sum_squares(const Attrs&, std::span<const TensorMeta> in) {
  std::vector<SbpSignature> sigs;
  for (int a = 0; a < static_cast<int>(in[0].shape.size()); ++a)
    sigs.push_back({{Sbp::split(a)}, {Sbp::partial_sum()}});
  sigs.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
  return sigs;
}

Status cpu_sum_squares(KernelContext& ctx) {
  const float* x = ctx.inputs[0].f32();
  double sum = 0.0;
  for (int64_t i = 0, n = ctx.inputs[0].size(); i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  ctx.outputs[0].f32()[0] = static_cast<float>(sum);
  return {};
}

Status infer_add_n(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].dtype != DType::kF32 || in[i].shape != in[0].shape)
      return invalid_argument("input {} is {} {}; every input must be f32 {}", i, dtype_name(in[i].dtype),
                              shape_string(in[i].shape), shape_string(in[0].shape));
  out->push_back(in[0]);
  return {};
}

std::vector<SbpSignature> sbp_add_n(const Attrs&, std::span<const TensorMeta> in) {
  const int n = static_cast<int>(in.size());
  auto sigs = math::split_or_broadcast(static_cast<int>(in[0].shape.size()), n);
  sigs.push_back(math::uniform_signature(Sbp::partial_sum(), n));
  return sigs;
}

Status grad_add_n(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty()) return {};
  for (int i = 0; i < g.num_inputs(); ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, dy);
  return {};
}

Status cpu_add_n(KernelContext& ctx) {
  float* y = ctx.outputs[0].f32();
  const int64_t n = ctx.outputs[0].size();
  const float* x0 = ctx.inputs[0].f32();
  for (int64_t i = 0; i < n; ++i) y[i] = x0[i];
  for (size_t k = 1; k < ctx.inputs.size(); ++k) {
    const float* xk = ctx.inputs[k].f32();
    for (int64_t i = 0; i < n; ++i) y[i] += xk[i];
  }
  return {};
}

Status infer_clip_factor(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_ASSIGN_OR_RETURN(double max_norm, read_float(attrs, "max_norm", 0.0));
  if (!(max_norm > 0)) return invalid_argument("attr 'max_norm' is {}; it must be > 0", max_norm);
  if (in[0].dtype != DType::kF32 || !math::is_scalar_shape(in[0].shape))
    return invalid_argument("total must be an f32 scalar, got {} {}", dtype_name(in[0].dtype), shape_string(in[0].shape));
  out->push_back({{}, DType::kF32});
  out->push_back({{}, DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_clip_factor(const Attrs&, std::span<const TensorMeta>) {
  return {{{Sbp::broadcast()}, {Sbp::broadcast(), Sbp::broadcast()}}};
}

Status cpu_clip_factor(KernelContext& ctx) {
  const double norm = std::sqrt(static_cast<double>(ctx.inputs[0].f32()[0]));
  const double max_norm = params_of<ClipFactorParams>(ctx).max_norm;
  ctx.outputs[0].f32()[0] = static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
  ctx.outputs[1].f32()[0] = static_cast<float>(norm);
  return {};
}

}  // namespace

const OpDef kSumSquaresOp = {.type = "sum_squares", .num_inputs = 1, .num_outputs = 1, .infer = infer_sum_squares,
                             .sbp = sbp_sum_squares, .cpu = cpu_sum_squares, .cuda = "sum_squares"};
const OpDef kAddNOp = {.type = "add_n", .num_inputs = -1, .num_outputs = 1, .infer = infer_add_n,
                       .sbp = sbp_add_n, .grad = grad_add_n, .cpu = cpu_add_n, .cuda = "add_n"};
const OpDef kClipFactorOp = {.type = "clip_factor", .num_inputs = 1, .num_outputs = 2, .infer = infer_clip_factor,
                             .sbp = sbp_clip_factor, .cpu = cpu_clip_factor, .cuda = "clip_factor",
                             .parse = parse_as<ClipFactorParams>};

}  // namespace rill
