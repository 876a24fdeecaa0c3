// layer_norm over the last axis: y = (x - mean) * rstd * gamma + beta, with
// rstd = 1 / sqrt(var + eps) (float attr `eps`, default 1e-5, the biased
// variance, as PyTorch). x [..., C], gamma and beta [C]; outputs y, and the
// row statistics mean and rstd [...] (f32), which the gradient reads instead
// of recomputing them. layer_norm_grad(dy, x, mean, rstd, gamma) gives dx,
// dgamma and dbeta. A row is whole on a device (the last axis is never split):
// rows split on any other axis give partial sums of dgamma and dbeta.
#include "kernels/ops/attr_read.h"
#include "kernels/ops/cpu_clones.h"
#include "kernels/ops/layer_norm_math.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status check_eps(const Attrs& attrs) {
  RILL_ASSIGN_OR_RETURN(double eps, read_float(attrs, "eps", 1e-5));
  if (!(eps > 0)) return invalid_argument("attr 'eps' is {}; it must be > 0", eps);
  return {};
}

Status check_row_param(const TensorMeta& p, const Shape& x, const char* name) {
  if (p.dtype != DType::kF32 || p.shape != Shape{x.back()})
    return invalid_argument("{} {} ({}) must be f32 [{}], the last axis of x {}", name, shape_string(p.shape),
                            dtype_name(p.dtype), x.back(), shape_string(x));
  return {};
}

Status infer_layer_norm(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_eps(attrs));
  const Shape& x = in[0].shape;
  if (in[0].dtype != DType::kF32 || x.empty() || x.back() == 0)
    return invalid_argument("x {} ({}) must be f32 with a non-empty last axis", shape_string(x),
                            dtype_name(in[0].dtype));
  RILL_RETURN_IF_ERROR(check_row_param(in[1], x, "gamma"));
  RILL_RETURN_IF_ERROR(check_row_param(in[2], x, "beta"));
  const Shape rows(x.begin(), x.end() - 1);
  out->push_back({x, DType::kF32});
  out->push_back({rows, DType::kF32});
  out->push_back({rows, DType::kF32});
  return {};
}

Status infer_layer_norm_grad(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_eps(attrs));
  const Shape& x = in[1].shape;
  if (in[0].shape != x || in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32 || x.empty() || x.back() == 0)
    return invalid_argument("dy {} and x {} must be f32 of one shape with a non-empty last axis",
                            shape_string(in[0].shape), shape_string(x));
  const Shape rows(x.begin(), x.end() - 1);
  if (in[2].shape != rows || in[3].shape != rows)
    return invalid_argument("mean {} and rstd {} must be {}", shape_string(in[2].shape), shape_string(in[3].shape),
                            shape_string(rows));
  RILL_RETURN_IF_ERROR(check_row_param(in[4], x, "gamma"));
  out->push_back({x, DType::kF32});
  out->push_back(in[4]);
  out->push_back(in[4]);
  return {};
}

std::vector<SbpSignature> sbp_layer_norm(const Attrs&, std::span<const TensorMeta> in) {
  const int rank = static_cast<int>(in[0].shape.size());
  const Sbp B = Sbp::broadcast();
  std::vector<SbpSignature> sigs;
  for (int a = 0; a + 1 < rank; ++a) {
    const Sbp s = Sbp::split(a);
    sigs.push_back({{s, B, B}, {s, s, s}});
  }
  sigs.push_back({{B, B, B}, {B, B, B}});
  return sigs;
}

std::vector<SbpSignature> sbp_layer_norm_grad(const Attrs&, std::span<const TensorMeta> in) {
  const int rank = static_cast<int>(in[1].shape.size());
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  std::vector<SbpSignature> sigs;
  for (int a = 0; a + 1 < rank; ++a) {
    const Sbp s = Sbp::split(a);
    sigs.push_back({{s, s, s, s, B}, {s, P, P}});
  }
  sigs.push_back({{B, B, B, B, B}, {B, B, B}});
  return sigs;
}

Status grad_layer_norm(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty()) return {};
  Attrs attrs;
  if (g.attrs().has("eps")) attrs.set("eps", g.attrs().get_float("eps", 1e-5));
  const auto grads =
      g.add_op("layer_norm_grad", {dy, g.input(0), g.output(1), g.output(2), g.input(1)}, attrs, 3);
  for (int i = 0; i < 3; ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, grads[static_cast<size_t>(i)]);
  return {};
}

// The row loops, each run through the copy for this CPU (cpu_clones.h): the
// sums along a row in column order, the rest elementwise.
void layer_norm_rows(const float* __restrict x, const float* __restrict gamma, const float* __restrict beta,
                     float* __restrict y, float* __restrict mean, float* __restrict rstd, int64_t rows, int64_t cols,
                     float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    layer_norm_math::row_stats(xr, cols, eps, &mean[r], &rstd[r]);
    float* yr = y + r * cols;
    const float m = mean[r], s = rstd[r];
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
  }
}

void layer_norm_grad_rows(const float* __restrict dy, const float* __restrict x, const float* __restrict mean,
                          const float* __restrict rstd, const float* __restrict gamma, float* __restrict dx,
                          float* __restrict dgamma, float* __restrict dbeta, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) dgamma[c] = dbeta[c] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    const float m = mean[r], s = rstd[r];
    for (int64_t c = 0; c < cols; ++c) {
      dgamma[c] += dyr[c] * (xr[c] - m) * s;
      dbeta[c] += dyr[c];
    }
    layer_norm_math::row_dx(xr, dyr, gamma, m, s, cols, dx + r * cols);
  }
}

Status cpu_layer_norm(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const int64_t cols = x.shape.back();
  const int64_t rows = cols == 0 ? 0 : x.size() / cols;
  cpu_clones::run<layer_norm_rows>(x.f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(), ctx.outputs[0].f32(),
                                   ctx.outputs[1].f32(), ctx.outputs[2].f32(), rows, cols,
                                   params_of<LayerNormParams>(ctx).eps);
  return {};
}

Status cpu_layer_norm_grad(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[1];
  const int64_t cols = x.shape.back();
  const int64_t rows = cols == 0 ? 0 : x.size() / cols;
  cpu_clones::run<layer_norm_grad_rows>(ctx.inputs[0].f32(), x.f32(), ctx.inputs[2].f32(), ctx.inputs[3].f32(),
                                        ctx.inputs[4].f32(), ctx.outputs[0].f32(), ctx.outputs[1].f32(),
                                        ctx.outputs[2].f32(), rows, cols);
  return {};
}

}  // namespace

const OpDef kLayerNormOp = {
    .type = "layer_norm",
    .num_inputs = 3,
    .num_outputs = 3,
    .infer = infer_layer_norm,
    .sbp = sbp_layer_norm,
    .grad = grad_layer_norm,
    .cpu = cpu_layer_norm,
    .cuda = "layer_norm",
    .parse = parse_as<LayerNormParams>,
};

const OpDef kLayerNormGradOp = {
    .type = "layer_norm_grad",
    .num_inputs = 5,
    .num_outputs = 3,
    .infer = infer_layer_norm_grad,
    .sbp = sbp_layer_norm_grad,
    .cpu = cpu_layer_norm_grad,
    .cuda = "layer_norm_grad",
};

}  // namespace rill
