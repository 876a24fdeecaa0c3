// zigzag(x) -> y: x in the zigzag order along one axis (zigzag_math.h), the
// order ring attention balances a causal mask in. Attrs: `axis` (default 1,
// the sequence of [B, T, ...]), `parts` (the devices the sequence is split
// over; 1 leaves it as it is; the axis a multiple of 2 parts) and `inverse`
// (1: back to the natural order; the op's gradient). The compiler puts each
// tensor a job marks as the sequence's through it when it balances a ring
// (compiler/ring_balance.h). A permutation: linear (P passes
// through), and a split on any other axis passes through.
#include "kernels/ops/attr_read.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/zigzag_math.h"

namespace rill {
namespace {

using Index = std::array<int64_t, kMaxKernelRank>;

Status zigzag_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  const Shape& x = inputs[0].shape;
  RILL_RETURN_IF_ERROR(check_rank_limit(x, "zigzag input"));
  RILL_ASSIGN_OR_RETURN(int64_t axis_attr, read_int(attrs, "axis", 1));
  RILL_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, x, "axis"));
  RILL_ASSIGN_OR_RETURN(int64_t parts, read_int(attrs, "parts", 1));
  RILL_ASSIGN_OR_RETURN(int64_t inverse, read_int(attrs, "inverse", 0));
  if (parts < 1) return invalid_argument("attr 'parts' = {} must be at least 1", parts);
  if (inverse != 0 && inverse != 1) return invalid_argument("attr 'inverse' = {} must be 0 or 1", inverse);
  if (parts > 1 && x[axis] % (2 * parts) != 0)
    return invalid_argument("zigzag of {} over {} parts: axis {} ({}) must be a multiple of {} (2 chunks a part)",
                            shape_string(x), parts, axis, x[axis], 2 * parts);
  outputs->push_back(inputs[0]);
  return {};
}

std::vector<SbpSignature> zigzag_sbp(const Attrs& attrs, std::span<const TensorMeta> inputs) {
  const int rank = static_cast<int>(inputs[0].shape.size());
  auto axis = normalize_axis(attrs.get_int("axis", 1), inputs[0].shape, "axis");
  std::vector<SbpSignature> sigs = math::split_or_broadcast(rank, 1, axis.ok() ? *axis : -1);
  sigs.push_back(math::uniform_signature(Sbp::partial_sum(), 1));
  return sigs;
}

Status zigzag_grad(GradBuilder& b) {
  std::string dy = b.output_grad(0);
  if (dy.empty() || !b.needs_input_grad(0)) return {};
  Attrs attrs{{"axis", b.attrs().get_int("axis", 1)},
              {"parts", b.attrs().get_int("parts", 1)},
              {"inverse", int64_t{b.attrs().get_int("inverse", 0) == 0 ? 1 : 0}}};
  b.set_input_grad(0, b.add_op("zigzag", {dy}, std::move(attrs))[0]);
  return {};
}

Status zigzag_kernel(KernelContext& ctx) {
  const TensorView& in = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  const ZigzagParams& p = params_of<ZigzagParams>(ctx);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  const int64_t axis = p.axis < 0 ? p.axis + rank : p.axis;
  if (axis < 0 || axis >= rank || in.shape != out.shape)
    return internal_error("zigzag of {} into {} along axis {}", shape_string(in.shape), shape_string(out.shape), p.axis);
  for_each_zigzag_chunk<Index>(in.shape, static_cast<int>(axis), p.parts, p.inverse,
                               [&](const Index& from, const Index& to, const Shape& extent) {
                                 copy_box(in.data, in.shape, from.data(), out.data, out.shape, to.data(), extent,
                                          dtype_size(out.dtype));
                               });
  return {};
}

}  // namespace

const OpDef kZigzagOp = {.type = "zigzag",
                         .infer = zigzag_infer,
                         .sbp = zigzag_sbp,
                         .grad = zigzag_grad,
                         .cpu = zigzag_kernel,
                         .cuda = "zigzag",
                         .parse = parse_as<ZigzagParams>};

}  // namespace rill
