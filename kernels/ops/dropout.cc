// dropout(x) with attrs `rate` (p, in [0, 1); default 0.1) and `seed` (int):
// y = x * mask / (1 - p), mask[i] = 0 with probability p, drawn as a
// function of the element's place in the logical tensor, the step and the
// micro-batch (dropout_math.h): every layout of a job drops the same
// elements, so layouts stay comparable (but for a sequence a balanced ring
// lays in the zigzag order, compiler/ring_balance.h, whose places in that
// order draw: the same rate, other elements). The gradient is dropout of dy with
// the same attrs (the same mask, the same scale). Linear in x: any split,
// B, or P passes through. Eval plans and eager forward runs take it as
// identity (OpDef::identity_in_eval).
#include <array>

#include "kernels/ops/attr_read.h"
#include "kernels/ops/dropout_math.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

constexpr double kDefaultRate = DropoutParams::kDefaultRate;

Status infer_dropout(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_float_attr(attrs, "rate"));
  const double rate = attrs.get_float("rate", kDefaultRate);
  if (!(rate >= 0.0 && rate < 1.0)) return invalid_argument("rate is {}; it must be in [0, 1)", rate);
  if (attrs.has("seed") && !std::holds_alternative<int64_t>(attrs.values().at("seed")))
    return invalid_argument("seed must be an integer");
  if (in[0].dtype != DType::kF32) return invalid_argument("x must be f32, got {}", dtype_name(in[0].dtype));
  out->push_back(in[0]);
  return {};
}

std::vector<SbpSignature> sbp_dropout(const Attrs&, std::span<const TensorMeta> in) {
  auto sigs = math::split_or_broadcast(static_cast<int>(in[0].shape.size()), 1);
  sigs.push_back(math::uniform_signature(Sbp::partial_sum(), 1));
  return sigs;
}

Status grad_dropout(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty() || !g.needs_input_grad(0)) return {};
  g.set_input_grad(0, g.add_op("dropout", {dy}, g.attrs())[0]);
  return {};
}

Status cpu_dropout(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const float* __restrict in = x.f32();
  float* __restrict y = ctx.outputs[0].f32();
  const int64_t n = x.size();
  const DropoutParams& p = params_of<DropoutParams>(ctx);
  const double rate = p.rate;
  if (rate == 0.0) {
    for (int64_t i = 0; i < n; ++i) y[i] = in[i];
    return {};
  }
  // Fixed-size index arrays: an act allocates nothing.
  const Shape& logical = ctx.logical_inputs.empty() ? x.shape : ctx.logical_inputs[0];
  const int64_t* offset = ctx.input_offsets.empty() ? nullptr : ctx.input_offsets[0].data();
  const int rank = static_cast<int>(x.shape.size());
  if (logical.size() != x.shape.size() || (offset && ctx.input_offsets[0].size() != x.shape.size()) ||
      rank > kMaxKernelRank)
    return internal_error("dropout: piece {} of logical {} disagree in rank (at most {} axes)", shape_string(x.shape),
                          shape_string(logical), kMaxKernelRank);
  auto origin = [&](int a) { return offset ? offset[a] : 0; };
  const uint64_t key = dropout_math::step_key(p.seed, ctx.step);
  const uint32_t threshold = dropout_math::threshold(rate);
  const float scale = static_cast<float>(1.0 / (1.0 - rate));
  const auto first = static_cast<uint64_t>(ctx.micro * num_elements(logical));  // the micro-batch's place in the step
  // Rows along the last axis: each row's first element's place in the
  // logical tensor, from the row's index over the leading axes.
  const int64_t cols = rank == 0 ? 1 : x.shape.back();
  const int64_t rows = cols == 0 ? 0 : n / cols;
  const std::array<int64_t, kMaxKernelRank> strides = row_major_strides(logical);
  std::array<int64_t, kMaxKernelRank> at{};  // the row's index per leading axis
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = rank == 0 ? 0 : origin(rank - 1);
    for (int a = 0; a + 1 < rank; ++a) base += (origin(a) + at[a]) * strides[a];
    const float* xr = in + r * cols;
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      yr[c] = dropout_math::keep(key, first + static_cast<uint64_t>(base + c), threshold) ? xr[c] * scale : 0.0f;
    for (int a = rank - 2; a >= 0; --a) {  // the next row
      if (++at[a] < x.shape[static_cast<size_t>(a)]) break;
      at[a] = 0;
    }
  }
  return {};
}

}  // namespace

const OpDef kDropoutOp = {
    .type = "dropout",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_dropout,
    .sbp = sbp_dropout,
    .grad = grad_dropout,
    .cpu = cpu_dropout,
    .cuda = "dropout",
    .parse = parse_as<DropoutParams>,
    .identity_in_eval = true,
    .seeded = true,
    .reads_step = true,
};

}  // namespace rill
