// cast: x as another floating dtype (attr `dtype`: f32, bf16 or f16), each
// value rounded to the nearest of the new dtype, ties to even (as CUDA's
// conversions and PyTorch's .to()). Mixed precision's seam: a matmul's
// inputs cast to bf16, its gradient passed back in f32. Elementwise, so every layout
// passes through; a partial sum's pieces round one by one.
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

StatusOr<DType> target_dtype(const Attrs& attrs) {
  const auto it = attrs.values().find("dtype");
  const std::string* text = it == attrs.values().end() ? nullptr : std::get_if<std::string>(&it->second);
  DType dtype = DType::kF32;
  if (text == nullptr || !parse_dtype(*text, &dtype))
    return invalid_argument("attr 'dtype' must name a dtype (f32, bf16 or f16), got {}",
                            text ? "'" + *text + "'" : std::string("none"));
  return dtype;
}

Status infer_cast(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_ASSIGN_OR_RETURN(DType to, target_dtype(attrs));
  if (!is_float(in[0].dtype) || !is_float(to))
    return invalid_argument("cast converts between f32, bf16 and f16, not {} to {}", dtype_name(in[0].dtype),
                            dtype_name(to));
  out->push_back({in[0].shape, to});
  return {};
}

std::vector<SbpSignature> sbp_cast(const Attrs&, std::span<const TensorMeta> in) {
  auto sigs = math::split_or_broadcast(static_cast<int>(in[0].shape.size()), 1);
  sigs.push_back(math::uniform_signature(Sbp::partial_sum(), 1));
  return sigs;
}

// Gradients of float tensors are f32 (compiler/autograd.cc): an f32 dy
// passes through as it is, unrounded; a 16-bit one is cast to x's dtype.
Status grad_cast(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty() || !g.needs_input_grad(0)) return {};
  const DType from = g.meta(g.input(0)).dtype;
  if (g.meta(dy).dtype == from || g.meta(dy).dtype == DType::kF32) {
    g.set_input_grad(0, dy);
    return {};
  }
  g.set_input_grad(0, g.add_op("cast", {dy}, {{"dtype", std::string(dtype_name(from))}})[0]);
  return {};
}

Status cpu_cast(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  const int64_t n = y.size();
  visit_dtype(x.dtype, [&]<typename From>(std::type_identity<From>) {
    visit_dtype(y.dtype, [&]<typename To>(std::type_identity<To>) {
      const From* __restrict src = static_cast<const From*>(x.data);
      To* __restrict dst = static_cast<To*>(y.data);
      for (int64_t i = 0; i < n; ++i) dst[i] = element_from<To>(float_of(src[i]));
    });
  });
  return {};
}

}  // namespace

const OpDef kCastOp = {
    .type = "cast",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_cast,
    .sbp = sbp_cast,
    .grad = grad_cast,
    .cpu = cpu_cast,
    .cuda = "cast",
};

}  // namespace rill
