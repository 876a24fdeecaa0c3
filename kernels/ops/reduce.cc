// reduce_sum, reduce_mean over the ints attr `axes` (empty: all), int attr
// `keepdims` (default 0), and their gradient broadcast_like(dy, x): dy spread
// back over x's shape along the same `axes`, times 1 / (logical count of the
// reduced elements) when int attr `mean` is 1. Means divide by LOGICAL counts
// (KernelContext::logical_inputs), so a split reduced axis gives partial sums
// that add up to the single-device value.
#include <algorithm>
#include <variant>

#include "kernels/ops/axis_runs.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

using math::kMaxRank;

Status check_reduce_attrs(const Attrs& attrs, const Shape& shape) {
  RILL_RETURN_IF_ERROR(math::check_ints_attr(attrs, "axes"));
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "keepdims"));
  if (shape.size() > kMaxRank)
    return invalid_argument("{} has rank {}; at most {} is supported", shape_string(shape), shape.size(), kMaxRank);
  return {};
}

Status infer_reduce(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_reduce_attrs(attrs, in[0].shape));
  if (in[0].dtype != DType::kF32) return invalid_argument("x must be f32, got {}", dtype_name(in[0].dtype));
  RILL_ASSIGN_OR_RETURN(auto axes, math::normalize_axes(attrs.get_ints("axes"), static_cast<int>(in[0].shape.size())));
  out->push_back({math::reduced_shape(in[0].shape, axes, attrs.get_int("keepdims", 0) != 0), DType::kF32});
  return {};
}

Status infer_broadcast_like(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_reduce_attrs(attrs, in[1].shape));
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "mean"));
  if (in[0].dtype != DType::kF32) return invalid_argument("dy must be f32, got {}", dtype_name(in[0].dtype));
  RILL_ASSIGN_OR_RETURN(auto axes, math::normalize_axes(attrs.get_ints("axes"), static_cast<int>(in[1].shape.size())));
  Shape expected = math::reduced_shape(in[1].shape, axes, attrs.get_int("keepdims", 0) != 0);
  if (expected != in[0].shape)
    return invalid_argument("dy {} does not match x {} reduced over axes [{}] (expected {})",
                            shape_string(in[0].shape), shape_string(in[1].shape), fmt::join(axes, ", "),
                            shape_string(expected));
  out->push_back({in[1].shape, DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_reduce(const Attrs& attrs, std::span<const TensorMeta> in) {
  const int rank = static_cast<int>(in[0].shape.size());
  auto axes = math::normalize_axes(attrs.get_ints("axes"), rank);
  if (!axes.ok()) return {};
  const bool keepdims = attrs.get_int("keepdims", 0) != 0;
  std::vector<SbpSignature> sigs;
  int removed = 0;  // reduced axes before axis a
  for (int a = 0; a < rank; ++a) {
    if (std::binary_search(axes->begin(), axes->end(), a)) {
      sigs.push_back({{Sbp::split(a)}, {Sbp::partial_sum()}});
      ++removed;
    } else {
      sigs.push_back({{Sbp::split(a)}, {Sbp::split(keepdims ? a : a - removed)}});
    }
  }
  sigs.push_back(math::uniform_signature(Sbp::broadcast(), 1));
  sigs.push_back(math::uniform_signature(Sbp::partial_sum(), 1));
  return sigs;
}

std::vector<SbpSignature> sbp_broadcast_like(const Attrs& attrs, std::span<const TensorMeta> in) {
  const int rank = static_cast<int>(in[1].shape.size());
  auto axes = math::normalize_axes(attrs.get_ints("axes"), rank);
  if (!axes.ok()) return {};
  const bool keepdims = attrs.get_int("keepdims", 0) != 0;
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  std::vector<SbpSignature> sigs;
  int removed = 0;
  for (int a = 0; a < rank; ++a) {
    if (std::binary_search(axes->begin(), axes->end(), a)) {
      sigs.push_back({{B, Sbp::split(a)}, {Sbp::split(a)}});  // whole dy, this piece of x
      ++removed;
    } else {
      sigs.push_back({{Sbp::split(keepdims ? a : a - removed), Sbp::split(a)}, {Sbp::split(a)}});
    }
  }
  sigs.push_back(math::uniform_signature(B, 2));
  sigs.push_back({{P, B}, {P}});
  return sigs;
}

template <bool kMean>
Status grad_reduce(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty() || !g.needs_input_grad(0)) return {};
  Attrs attrs{{"axes", g.attrs().get_ints("axes")},
              {"keepdims", g.attrs().get_int("keepdims", 0)},
              {"mean", int64_t{kMean ? 1 : 0}}};
  g.set_input_grad(0, g.add_op("broadcast_like", {dy, g.input(0)}, attrs)[0]);
  return {};
}

}  // namespace

namespace math {

AxisRuns axis_runs(const Shape& big, std::span<const int64_t> axes) {
  const int rank = static_cast<int>(big.size());
  bool mask[kMaxRank] = {};
  if (axes.empty()) std::fill_n(mask, rank, true);
  for (int64_t a : axes) mask[a < 0 ? a + rank : a] = true;
  AxisRuns runs;
  for (int a = 0; a < rank; ++a) {
    if (big[a] == 1) continue;
    if (runs.count > 0 && runs.reduced[runs.count - 1] == mask[a]) {
      runs.size[runs.count - 1] *= big[a];
    } else {
      runs.size[runs.count] = big[a];
      runs.reduced[runs.count] = mask[a];
      ++runs.count;
    }
  }
  if (runs.count == 0) {
    runs.size[0] = 1;
    runs.reduced[0] = false;
    runs.count = 1;
  }
  int64_t stride = 1;
  for (int r = runs.count - 1; r >= 0; --r) {
    runs.small_stride[r] = runs.reduced[r] ? 0 : stride;
    if (!runs.reduced[r]) stride *= runs.size[r];
  }
  return runs;
}

}  // namespace math

namespace {

using math::AxisRuns;
using math::axis_runs;

// Walks the big tensor one innermost run at a time, in memory order, calling
// fn(big_offset, small_offset) for each.
template <typename Fn>
void for_each_inner_run(const AxisRuns& runs, Fn fn) {
  const int outer_runs = runs.count - 1;
  const int64_t inner = runs.size[runs.count - 1];
  int64_t outer = 1;
  for (int r = 0; r < outer_runs; ++r) outer *= runs.size[r];
  int64_t index[kMaxRank] = {};
  int64_t small = 0;
  for (int64_t o = 0; o < outer; ++o) {
    fn(o * inner, small);
    for (int r = outer_runs - 1; r >= 0; --r) {
      small += runs.small_stride[r];
      if (++index[r] < runs.size[r]) break;
      small -= runs.small_stride[r] * runs.size[r];
      index[r] = 0;
    }
  }
}

}  // namespace

int64_t math::logical_count(const Shape& logical, std::span<const int64_t> axes) {
  AxisRuns runs = axis_runs(logical, axes);
  int64_t n = 1;
  for (int r = 0; r < runs.count; ++r)
    if (runs.reduced[r]) n *= runs.size[r];
  return n;
}

namespace {

using math::logical_count;

template <bool kMean>
Status cpu_reduce(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  float* __restrict y = ctx.outputs[0].f32();
  std::fill_n(y, ctx.outputs[0].size(), 0.0f);
  if (x.size() == 0) return {};
  const ReduceParams& p = params_of<ReduceParams>(ctx);
  const AxisRuns runs = axis_runs(x.shape, p.axes);
  const float* __restrict xp = x.f32();
  const int64_t inner = runs.size[runs.count - 1];
  if (runs.reduced[runs.count - 1]) {
    for_each_inner_run(runs, [&](int64_t big, int64_t small) {
      double sum = 0.0;  // long runs (a whole batch) keep their precision
      for (int64_t j = 0; j < inner; ++j) sum += xp[big + j];
      y[small] += static_cast<float>(sum);
    });
  } else {
    for_each_inner_run(runs, [&](int64_t big, int64_t small) {
      for (int64_t j = 0; j < inner; ++j) y[small + j] += xp[big + j];
    });
  }
  if (kMean) {
    const int64_t count = logical_count(ctx.logical_inputs[0], p.axes);
    const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
    for (int64_t i = 0; i < ctx.outputs[0].size(); ++i) y[i] *= scale;
  }
  return {};
}

Status cpu_broadcast_like(KernelContext& ctx) {
  const float* __restrict dy = ctx.inputs[0].f32();
  TensorView& out = ctx.outputs[0];
  float* __restrict dx = out.f32();
  if (out.size() == 0) return {};
  float scale = 1.0f;
  const ReduceParams& p = params_of<ReduceParams>(ctx);
  if (p.mean) {
    const int64_t count = logical_count(ctx.logical_inputs[1], p.axes);
    scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  }
  const AxisRuns runs = axis_runs(out.shape, p.axes);
  const int64_t inner = runs.size[runs.count - 1];
  if (runs.reduced[runs.count - 1]) {
    for_each_inner_run(runs, [&](int64_t big, int64_t small) { std::fill_n(dx + big, inner, dy[small] * scale); });
  } else {
    for_each_inner_run(runs, [&](int64_t big, int64_t small) {
      for (int64_t j = 0; j < inner; ++j) dx[big + j] = dy[small + j] * scale;
    });
  }
  return {};
}

}  // namespace

const OpDef kReduceSumOp = {
    .type = "reduce_sum",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_reduce,
    .sbp = sbp_reduce,
    .grad = grad_reduce<false>,
    .cpu = cpu_reduce<false>,
    .cuda = "reduce_sum",
    .parse = parse_as<ReduceParams>,
};

const OpDef kReduceMeanOp = {
    .type = "reduce_mean",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_reduce,
    .sbp = sbp_reduce,
    .grad = grad_reduce<true>,
    .cpu = cpu_reduce<true>,
    .cuda = "reduce_mean",
    .parse = parse_as<ReduceParams>,
};

const OpDef kBroadcastLikeOp = {
    .type = "broadcast_like",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_broadcast_like,
    .sbp = sbp_broadcast_like,
    .cpu = cpu_broadcast_like,
    .cuda = "broadcast_like",
    .parse = parse_as<ReduceParams>,
};

}  // namespace rill
