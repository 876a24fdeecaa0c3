// The collectives as ops of a job, in the mirrored view (train.view
// "mirrored"), where every device is a rank holding its own value of each
// tensor. Shapes here are a rank's own: what its program sees.
//   all_reduce      y = the ranks' x combined elementwise; attr `reduce`
//                   "sum" (default), "mean", "max", "min" or "prod"; f32.
//   all_gather      y = the ranks' x concatenated along axis 0, in rank
//                   order ([ranks * n, ...] from [n, ...]); any dtype.
//   reduce_scatter  y = this rank's block of axis 0 of the ranks' x
//                   combined (`reduce` as all_reduce); axis 0 must divide
//                   by the ranks; f32.
// The exchange is not the kernel's: the compiler reads the op's input through
// a boxing of the ranks' pieces (P -> B, S(0) -> B, P -> S(0); a collective
// across nodes), and the kernel only finishes it: a copy, or the mean's
// 1/ranks. The compiler sets `ranks` (the devices of the job) and `scale`.
// They are not differentiable.
#include <cstring>

#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

int64_t ranks_of(const Attrs& attrs) { return attrs.get_int("ranks", 1); }

Status check_collective(const Attrs& attrs, const TensorMeta& x, bool reduces) {
  RILL_RETURN_IF_ERROR(math::check_int_attr(attrs, "ranks"));
  RILL_RETURN_IF_ERROR(math::check_float_attr(attrs, "scale"));
  if (ranks_of(attrs) < 1) return invalid_argument("ranks is {}, expected at least 1", ranks_of(attrs));
  if (!reduces) return {};
  RILL_RETURN_IF_ERROR(math::check_string_attr(attrs, "reduce"));
  const std::string reduce = attrs.get_string("reduce", "sum");
  if (collective_reduce_code(reduce) < 0)
    return invalid_argument("reduce is '{}'; expected \"sum\", \"mean\", \"max\", \"min\" or \"prod\"", reduce);
  if (x.dtype != DType::kF32)
    return invalid_argument("x must be f32 to be combined across ranks, got {}", dtype_name(x.dtype));
  return {};
}

Status infer_all_reduce(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_collective(attrs, in[0], true));
  out->push_back(in[0]);
  return {};
}

Status infer_all_gather(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_collective(attrs, in[0], false));
  if (in[0].shape.empty()) return invalid_argument("x is a scalar; all_gather concatenates along axis 0 (reshape to [1])");
  Shape shape = in[0].shape;
  shape[0] *= ranks_of(attrs);
  out->push_back({shape, in[0].dtype});
  return {};
}

Status infer_reduce_scatter(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_collective(attrs, in[0], true));
  const int64_t ranks = ranks_of(attrs);
  if (in[0].shape.empty() || in[0].shape[0] % ranks != 0)
    return invalid_argument("x has shape {}; reduce_scatter cuts axis 0 into {} equal blocks", shape_string(in[0].shape),
                            ranks);
  Shape shape = in[0].shape;
  shape[0] /= ranks;
  out->push_back({shape, in[0].dtype});
  return {};
}

// What the kernel reads (the boxing's result) and writes.
std::vector<SbpSignature> sbp_whole(const Attrs&, std::span<const TensorMeta>) {
  return {math::uniform_signature(Sbp::broadcast(), 1)};
}
std::vector<SbpSignature> sbp_blocks(const Attrs&, std::span<const TensorMeta>) {
  return {math::uniform_signature(Sbp::split(0), 1)};
}

// y = x * scale (the mean's 1/ranks), or a copy.
Status cpu_finish(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  TensorView& y = ctx.outputs[0];
  if (x.bytes() != y.bytes())
    return internal_error("collective of {} into {}: sizes differ", shape_string(x.shape), shape_string(y.shape));
  const double scale = params_of<ScaleParams>(ctx).scale;
  if (scale == 1.0 || x.dtype != DType::kF32) {
    if (x.data != y.data && x.bytes() > 0) std::memcpy(y.data, x.data, x.bytes());
    return {};
  }
  const float s = static_cast<float>(scale);
  const float* xs = x.f32();
  float* ys = y.f32();
  for (int64_t i = 0, n = y.size(); i < n; ++i) ys[i] = xs[i] * s;
  return {};
}

}  // namespace

int collective_reduce_code(const std::string& reduce) {
  if (reduce == "sum" || reduce == "mean") return 0;
  return reduce == "max" ? 1 : reduce == "min" ? 2 : reduce == "prod" ? 3 : -1;
}

const OpDef kAllReduceOp = {
    .type = "all_reduce", .role = OpRole::kCollective, .infer = infer_all_reduce, .sbp = sbp_whole,
    .cpu = cpu_finish, .cuda = "scale", .parse = parse_as<ScaleParams>};
const OpDef kAllGatherOp = {
    .type = "all_gather", .role = OpRole::kCollective, .infer = infer_all_gather, .sbp = sbp_whole,
    .cpu = cpu_finish, .cuda = "copy", .parse = parse_as<ScaleParams>};
const OpDef kReduceScatterOp = {.type = "reduce_scatter",
                                .role = OpRole::kCollective,
                                .infer = infer_reduce_scatter,
                                .sbp = sbp_blocks,
                                .cpu = cpu_finish, .cuda = "scale", .parse = parse_as<ScaleParams>};

}  // namespace rill
