// bias_gelu_tanh: y = gelu_tanh(x + b), b [N] over the last axis of x
// [..., N]: bias_add and gelu_tanh in one pass, the sum never written (the
// compiler fuses the pair where nothing else reads the sum, compiler/
// fusion.h). Each element is the same float operations in the same order
// as the two ops (activation_math.h), so the result is theirs bit for bit.
// Its gradient, bias_gelu_tanh_grad(x, b, dy) -> dx, remakes x + b; b's
// gradient sums dx over the leading axes, as bias_add's does.
#include "kernels/ops/activation_math.h"
#include "kernels/ops/cpu_clones.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status check_x_b(std::span<const TensorMeta> in) {
  const Shape& x = in[0].shape;
  const Shape& b = in[1].shape;
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("x and b must be f32, got {} and {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  if (x.empty() || b.size() != 1 || b[0] != x.back())
    return invalid_argument("b {} must be [N], the last axis of x {}", shape_string(b), shape_string(x));
  return {};
}

Status infer_bias_gelu(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_x_b(in));
  out->push_back({in[0].shape, DType::kF32});
  return {};
}

Status infer_bias_gelu_grad(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_x_b(in));
  if (in[2].dtype != DType::kF32 || in[2].shape != in[0].shape)
    return invalid_argument("dy {} {} must be f32 shaped like x {}", dtype_name(in[2].dtype), shape_string(in[2].shape),
                            shape_string(in[0].shape));
  out->push_back({in[0].shape, DType::kF32});
  return {};
}

// x (and dy) split on any axis; b whole, or split with x's last axis.
std::vector<SbpSignature> signatures(const Shape& x, bool with_dy) {
  const int rank = static_cast<int>(x.size());
  const Sbp B = Sbp::broadcast();
  std::vector<SbpSignature> sigs;
  auto add = [&](Sbp xs, Sbp bs) {
    SbpSignature sig{{xs, bs}, {xs}};
    if (with_dy) sig.inputs.push_back(xs);
    sigs.push_back(sig);
  };
  for (int i = 0; i + 1 < rank; ++i) add(Sbp::split(i), B);
  add(Sbp::split(rank - 1), Sbp::split(0));
  add(B, B);
  return sigs;
}

std::vector<SbpSignature> sbp_bias_gelu(const Attrs&, std::span<const TensorMeta> in) {
  return signatures(in[0].shape, false);
}
std::vector<SbpSignature> sbp_bias_gelu_grad(const Attrs&, std::span<const TensorMeta> in) {
  return signatures(in[0].shape, true);
}

Status grad_bias_gelu(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty()) return {};
  const std::string dx = g.add_op("bias_gelu_tanh_grad", {g.input(0), g.input(1), dy})[0];
  if (g.needs_input_grad(0)) g.set_input_grad(0, dx);
  if (g.needs_input_grad(1)) {
    const int64_t rank = static_cast<int64_t>(g.meta(g.input(0)).shape.size());
    std::vector<int64_t> axes;
    for (int64_t i = 0; i + 1 < rank; ++i) axes.push_back(i);
    g.set_input_grad(1, axes.empty() ? dx : g.add_op("reduce_sum", {dx}, {{"axes", axes}, {"keepdims", int64_t{0}}})[0]);
  }
  return {};
}

// The loops, each run through the copy for this CPU (cpu_clones.h).
void forward_rows(const float* __restrict x, const float* __restrict b, float* __restrict y, int64_t rows,
                  int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) y[r * n + j] = act::forward<act::Act::kGeluTanh>(x[r * n + j] + b[j]);
}

void backward_rows(const float* __restrict x, const float* __restrict b, const float* __restrict dy,
                   float* __restrict dx, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      dx[r * n + j] = act::backward<act::Act::kGeluTanh>(x[r * n + j] + b[j], dy[r * n + j]);
}

Status cpu_bias_gelu(KernelContext& ctx) {
  const int64_t n = ctx.inputs[1].size();
  if (n > 0)
    cpu_clones::run<forward_rows>(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(),
                                  ctx.inputs[0].size() / n, n);
  return {};
}

Status cpu_bias_gelu_grad(KernelContext& ctx) {
  const int64_t n = ctx.inputs[1].size();
  if (n > 0)
    cpu_clones::run<backward_rows>(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
                                   ctx.outputs[0].f32(), ctx.inputs[0].size() / n, n);
  return {};
}

}  // namespace

const OpDef kBiasGeluTanhOp = {.type = "bias_gelu_tanh", .num_inputs = 2, .num_outputs = 1,
                               .infer = infer_bias_gelu, .sbp = sbp_bias_gelu, .grad = grad_bias_gelu,
                               .cpu = cpu_bias_gelu, .cuda = "bias_gelu_tanh"};
const OpDef kBiasGeluTanhGradOp = {.type = "bias_gelu_tanh_grad", .num_inputs = 3, .num_outputs = 1,
                                   .infer = infer_bias_gelu_grad, .sbp = sbp_bias_gelu_grad,
                                   .cpu = cpu_bias_gelu_grad, .cuda = "bias_gelu_tanh_grad"};

}  // namespace rill
