// Box-copy ops: slice (take a box of the input), slice_grad (put a box back
// into zeros of the input's shape) and concat (join along one axis). All are
// linear, so partial sums pass through, and a split passes through on any axis
// the op does not cut. Kernels take box extents from the physical shapes they
// are handed, so the same code serves whole tensors and split pieces.
#include <cstring>

#include "kernels/ops/attr_read.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

using Index = std::array<int64_t, kMaxKernelRank>;

// --- slice / slice_grad --------------------------------------------------------

struct SliceBounds {
  std::vector<int64_t> starts, ends;  // ends resolved (-1 -> the axis' size)
  bool cuts(size_t axis, const Shape& shape) const { return starts[axis] != 0 || ends[axis] != shape[axis]; }
  Shape extent() const {
    Shape out(starts.size());
    for (size_t d = 0; d < starts.size(); ++d) out[d] = ends[d] - starts[d];
    return out;
  }
};

StatusOr<SliceBounds> slice_bounds(const Attrs& attrs, const Shape& shape) {
  SliceBounds b;
  RILL_ASSIGN_OR_RETURN(b.starts, read_ints(attrs, "starts", true));
  RILL_ASSIGN_OR_RETURN(b.ends, read_ints(attrs, "ends", true));
  if (b.starts.size() != shape.size() || b.ends.size() != shape.size())
    return invalid_argument("attrs 'starts' = {} and 'ends' = {} need one entry per axis of shape {}",
                            shape_string(b.starts), shape_string(b.ends), shape_string(shape));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (b.ends[d] == -1) b.ends[d] = shape[d];
    if (b.starts[d] < 0 || b.starts[d] >= b.ends[d] || b.ends[d] > shape[d])
      return invalid_argument(
          "attrs 'starts' = {}, 'ends' = {}: axis {} needs 0 <= start < end <= {} "
          "(end -1 means the end) for shape {}",
          shape_string(attrs.get_ints("starts")), shape_string(attrs.get_ints("ends")), d, shape[d],
          shape_string(shape));
  }
  return b;
}

// B, P, and S(a) for every axis a the slice leaves whole; `shape` is the big side.
std::vector<SbpSignature> slice_signatures(const Attrs& attrs, const Shape& shape) {
  std::vector<SbpSignature> sigs = {{{Sbp::broadcast()}, {Sbp::broadcast()}},
                                    {{Sbp::partial_sum()}, {Sbp::partial_sum()}}};
  auto bounds = slice_bounds(attrs, shape);
  if (!bounds.ok()) return sigs;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (bounds->cuts(a, shape)) continue;
    Sbp s = Sbp::split(static_cast<int>(a));
    sigs.push_back({{s}, {s}});
  }
  return sigs;
}


Status slice_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  RILL_RETURN_IF_ERROR(check_rank_limit(inputs[0].shape, "slice input"));
  RILL_ASSIGN_OR_RETURN(SliceBounds b, slice_bounds(attrs, inputs[0].shape));
  outputs->push_back({b.extent(), inputs[0].dtype});
  return {};
}

std::vector<SbpSignature> slice_sbp(const Attrs& attrs, std::span<const TensorMeta> inputs) {
  return slice_signatures(attrs, inputs[0].shape);
}

Status slice_kernel(KernelContext& ctx) {
  const TensorView& in = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  Index origin{}, zero{};
  RILL_RETURN_IF_ERROR(box_origin(params_of<SliceParams>(ctx).starts, in.shape, out.shape, &origin));
  copy_box(in.data, in.shape, origin.data(), out.data, out.shape, zero.data(), out.shape, dtype_size(out.dtype));
  return {};
}

Status slice_grad(GradBuilder& b) {
  std::string dy = b.output_grad(0);
  if (dy.empty() || !b.needs_input_grad(0)) return {};
  Attrs attrs{{"starts", b.attrs().get_ints("starts")},
              {"ends", b.attrs().get_ints("ends")},
              {"shape", std::vector<int64_t>(b.meta(b.input(0)).shape)}};
  b.set_input_grad(0, b.add_op("slice_grad", {dy}, std::move(attrs))[0]);
  return {};
}

// slice_grad: input 0 is the slice's output gradient; attr `shape` is the
// slice's input shape, which is this op's output shape.
Status slice_grad_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  RILL_ASSIGN_OR_RETURN(Shape shape, read_ints(attrs, "shape", true));
  for (int64_t dim : shape)
    if (dim <= 0) return invalid_argument("attr 'shape' = {}: dims must be positive", shape_string(shape));
  RILL_RETURN_IF_ERROR(check_rank_limit(shape, "slice_grad output"));
  RILL_ASSIGN_OR_RETURN(SliceBounds b, slice_bounds(attrs, shape));
  if (b.extent() != inputs[0].shape)
    return invalid_argument("input shape {} is not the shape {} that attrs 'starts', 'ends' take from {}",
                            shape_string(inputs[0].shape), shape_string(b.extent()), shape_string(shape));
  outputs->push_back({std::move(shape), inputs[0].dtype});
  return {};
}

std::vector<SbpSignature> slice_grad_sbp(const Attrs& attrs, std::span<const TensorMeta>) {
  return slice_signatures(attrs, attrs.get_ints("shape"));
}

Status slice_grad_kernel(KernelContext& ctx) {
  const TensorView& dy = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  Index origin{}, zero{};
  RILL_RETURN_IF_ERROR(box_origin(params_of<SliceParams>(ctx).starts, out.shape, dy.shape, &origin));
  std::memset(out.data, 0, out.bytes());
  copy_box(dy.data, dy.shape, zero.data(), out.data, out.shape, origin.data(), dy.shape, dtype_size(out.dtype));
  return {};
}

Status slice_grad_grad(GradBuilder& b) {
  std::string dz = b.output_grad(0);
  if (dz.empty() || !b.needs_input_grad(0)) return {};
  Attrs attrs{{"starts", b.attrs().get_ints("starts")}, {"ends", b.attrs().get_ints("ends")}};
  b.set_input_grad(0, b.add_op("slice", {dz}, std::move(attrs))[0]);
  return {};
}

// --- concat ------------------------------------------------------------------

StatusOr<int> concat_axis(const Attrs& attrs, const Shape& first) {
  RILL_ASSIGN_OR_RETURN(int64_t axis, read_int(attrs, "axis", 0));
  if (first.empty()) return invalid_argument("cannot concat scalars (input 0 has shape [])");
  return normalize_axis(axis, first, "axis");
}

Status concat_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  const Shape& first = inputs[0].shape;
  RILL_RETURN_IF_ERROR(check_rank_limit(first, "concat input 0"));
  RILL_ASSIGN_OR_RETURN(int axis, concat_axis(attrs, first));
  Shape out = first;
  for (size_t i = 1; i < inputs.size(); ++i) {
    const Shape& shape = inputs[i].shape;
    bool match = shape.size() == first.size();
    for (size_t d = 0; match && d < shape.size(); ++d)
      if (static_cast<int>(d) != axis && shape[d] != first[d]) match = false;
    if (!match)
      return invalid_argument("input {} has shape {} but input 0 has shape {}; they may differ only on axis {}", i,
                              shape_string(shape), shape_string(first), axis);
    if (inputs[i].dtype != inputs[0].dtype)
      return invalid_argument("input {} is {} but input 0 is {}", i, dtype_name(inputs[i].dtype),
                              dtype_name(inputs[0].dtype));
    out[axis] += shape[axis];
  }
  outputs->push_back({std::move(out), inputs[0].dtype});
  return {};
}

std::vector<SbpSignature> concat_sbp(const Attrs& attrs, std::span<const TensorMeta> inputs) {
  size_t n = inputs.size();
  std::vector<SbpSignature> sigs = {{std::vector<Sbp>(n, Sbp::broadcast()), {Sbp::broadcast()}},
                                    {std::vector<Sbp>(n, Sbp::partial_sum()), {Sbp::partial_sum()}}};
  auto axis = concat_axis(attrs, inputs[0].shape);
  if (!axis.ok()) return sigs;
  for (size_t a = 0; a < inputs[0].shape.size(); ++a) {
    if (static_cast<int>(a) == *axis) continue;
    Sbp s = Sbp::split(static_cast<int>(a));
    sigs.push_back({std::vector<Sbp>(n, s), {s}});
  }
  return sigs;
}

Status concat_kernel(KernelContext& ctx) {
  const TensorView& out = ctx.outputs[0];
  int64_t axis = params_of<ConcatParams>(ctx).axis;
  int rank = static_cast<int>(out.shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || rank > kMaxKernelRank)
    return internal_error("concat into {}: attr 'axis' = {} does not match", shape_string(out.shape), axis);
  Index origin{}, zero{};
  for (const TensorView& in : ctx.inputs) {
    if (in.shape.size() != out.shape.size() || origin[axis] + in.shape[axis] > out.shape[axis])
      return internal_error("concat of {} overruns output {}", shape_string(in.shape), shape_string(out.shape));
    copy_box(in.data, in.shape, zero.data(), out.data, out.shape, origin.data(), in.shape, dtype_size(out.dtype));
    origin[axis] += in.shape[axis];
  }
  if (origin[axis] != out.shape[axis])
    return internal_error("concat inputs fill {} of {} along axis {}", origin[axis], out.shape[axis], axis);
  return {};
}

Status concat_grad(GradBuilder& b) {
  std::string dy = b.output_grad(0);
  if (dy.empty()) return {};
  const Shape& first = b.meta(b.input(0)).shape;
  RILL_ASSIGN_OR_RETURN(int axis, concat_axis(b.attrs(), first));
  int64_t offset = 0;
  for (int i = 0; i < b.num_inputs(); ++i) {
    int64_t size = b.meta(b.input(i)).shape[axis];
    if (b.needs_input_grad(i)) {
      std::vector<int64_t> starts(first.size(), 0), ends(first.size(), -1);
      starts[axis] = offset;
      ends[axis] = offset + size;
      b.set_input_grad(i, b.add_op("slice", {dy}, {{"starts", starts}, {"ends", ends}})[0]);
    }
    offset += size;
  }
  return {};
}

}  // namespace

Status box_origin(std::span<const int64_t> starts, const Shape& big, const Shape& small, Index* origin) {
  if (starts.size() != big.size() || small.size() != big.size() || big.size() > static_cast<size_t>(kMaxKernelRank))
    return internal_error("slice box {} in {}: attr 'starts' does not match", shape_string(small), shape_string(big));
  for (size_t d = 0; d < big.size(); ++d) {
    (*origin)[d] = starts[d];
    if (starts[d] + small[d] > big[d])
      return internal_error("slice box {} at {} overruns {}", shape_string(small),
                            shape_string(Shape(starts.begin(), starts.end())), shape_string(big));
  }
  return {};
}

const OpDef kSliceOp = {
    .type = "slice", .infer = slice_infer, .sbp = slice_sbp, .grad = slice_grad, .cpu = slice_kernel, .cuda = "slice", .parse = parse_as<SliceParams>};
const OpDef kSliceGradOp = {.type = "slice_grad",
                            .infer = slice_grad_infer,
                            .sbp = slice_grad_sbp,
                            .grad = slice_grad_grad,
                            .cpu = slice_grad_kernel, .cuda = "slice_grad", .parse = parse_as<SliceParams>};
const OpDef kConcatOp = {.type = "concat",
                         .num_inputs = -1,
                         .infer = concat_infer,
                         .sbp = concat_sbp,
                         .grad = concat_grad,
                         .cpu = concat_kernel, .cuda = "concat", .parse = parse_as<ConcatParams>};

}  // namespace rill
