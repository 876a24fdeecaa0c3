// softmax over the last axis, y = softmax(scale * x), and softmax_grad(y, dy)
// = scale * y * (dy - sum(dy * y)) per row. A row must be whole on a device,
// so the last axis is never split. Attrs: `scale` (a float > 0, default 1:
// attention's 1 / sqrt(head size)) and `causal` (0 or 1): x [..., T, S],
// T <= S, is a stack of attention score matrices and row q sees only
// columns 0..q (the rest of y is 0). The query axis may split (context
// parallelism): a piece's row q is the sequence's offset + q.
#include "kernels/ops/attr_read.h"
#include "kernels/ops/cpu_clones.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/softmax_math.h"

namespace rill {
namespace {

bool causal(const Attrs& attrs) { return attrs.get_int("causal", 0) != 0; }

Status check_attrs(const Attrs& attrs, const Shape& x) {
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "causal"));
  RILL_ASSIGN_OR_RETURN(double scale, read_float(attrs, "scale", 1.0));
  if (!(scale > 0)) return invalid_argument("attr 'scale' is {}; it must be > 0", scale);
  // A piece of the queries (context parallelism) has fewer rows than keys.
  if (causal(attrs) && (x.size() < 2 || x[x.size() - 1] < x[x.size() - 2]))
    return invalid_argument("causal: x {} must end in [T, S] (queries by keys) with T <= S", shape_string(x));
  return {};
}

Status infer_softmax(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in[0].dtype != DType::kF32) return invalid_argument("x must be f32, got {}", dtype_name(in[0].dtype));
  if (in[0].shape.empty()) return invalid_argument("x {} must have at least one axis", shape_string(in[0].shape));
  RILL_RETURN_IF_ERROR(check_attrs(attrs, in[0].shape));
  out->push_back(in[0]);
  return {};
}

Status infer_softmax_grad(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("y and dy must be f32, got {} and {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  if (in[0].shape != in[1].shape || in[0].shape.empty())
    return invalid_argument("y {} and dy {} must have the same shape, with at least one axis",
                            shape_string(in[0].shape), shape_string(in[1].shape));
  RILL_RETURN_IF_ERROR(check_attrs(attrs, in[0].shape));
  out->push_back(in[1]);
  return {};
}

// Splits on every axis but the row's. A causal mask's query axis splits
// too (context parallelism): a piece's rows start at its offset in the
// whole sequence, which the kernel reads (query_offset).
std::vector<SbpSignature> row_signatures(const Attrs& attrs, int rank, int num_inputs) {
  std::vector<SbpSignature> sigs;
  for (int a = 0; a < rank - 1; ++a) sigs.push_back(math::uniform_signature(Sbp::split(a), num_inputs));
  sigs.push_back(math::uniform_signature(Sbp::broadcast(), num_inputs));
  return sigs;
}

std::vector<SbpSignature> sbp_softmax(const Attrs& attrs, std::span<const TensorMeta> in) {
  return row_signatures(attrs, static_cast<int>(in[0].shape.size()), 1);
}

std::vector<SbpSignature> sbp_softmax_grad(const Attrs& attrs, std::span<const TensorMeta> in) {
  auto sigs = row_signatures(attrs, static_cast<int>(in[0].shape.size()), 2);
  sigs.push_back({{Sbp::broadcast(), Sbp::partial_sum()}, {Sbp::partial_sum()}});  // linear in dy
  return sigs;
}

Status grad_softmax(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty() || !g.needs_input_grad(0)) return {};
  Attrs attrs;
  if (g.attrs().has("scale")) attrs.set("scale", g.attrs().get_float("scale", 1.0));
  g.set_input_grad(0, g.add_op("softmax_grad", {g.output(0), dy}, attrs)[0]);
  return {};
}

// The row loops, each run through the copy for this CPU (cpu_clones.h).
// Causal: row r is query offset + r % queries of its [queries, cols] matrix.
void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, bool causal, int64_t queries, int64_t offset,
                  float scale) {
  for (int64_t r = 0; r < rows; ++r)
    softmax_math::softmax_row(x + r * cols, y + r * cols, cols, causal ? offset + r % queries + 1 : cols, scale);
}

void softmax_grad_rows(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, float scale) {
  for (int64_t r = 0; r < rows; ++r)
    softmax_math::softmax_grad_row(y + r * cols, dy + r * cols, dx + r * cols, cols, scale);
}

Status cpu_softmax(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const int64_t cols = x.shape.back();
  if (cols == 0) return {};
  const SoftmaxParams& p = params_of<SoftmaxParams>(ctx);
  const size_t rank = x.shape.size();
  const int64_t queries = rank >= 2 ? x.shape[rank - 2] : 1;
  const int64_t offset = p.causal ? query_offset(ctx, rank - 2) : 0;
  if (p.causal && offset + queries > cols)
    return internal_error("op 'softmax': causal rows {} to {} of scores {} pass their {} keys", offset,
                          offset + queries, shape_string(x.shape), cols);
  cpu_clones::run<softmax_rows>(x.f32(), ctx.outputs[0].f32(), x.size() / cols, cols, p.causal, queries, offset,
                                p.scale);
  return {};
}

Status cpu_softmax_grad(KernelContext& ctx) {
  const TensorView& y = ctx.inputs[0];
  const int64_t cols = y.shape.back();
  if (cols == 0) return {};
  cpu_clones::run<softmax_grad_rows>(y.f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(), y.size() / cols, cols,
                                     params_of<SoftmaxParams>(ctx).scale);
  return {};
}

}  // namespace

const OpDef kSoftmaxOp = {
    .type = "softmax",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_softmax,
    .sbp = sbp_softmax,
    .grad = grad_softmax,
    .cpu = cpu_softmax,
    .cuda = "softmax",
    .parse = parse_as<SoftmaxParams>,
};

const OpDef kSoftmaxGradOp = {
    .type = "softmax_grad",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_softmax_grad,
    .sbp = sbp_softmax_grad,
    .cpu = cpu_softmax_grad,
    .cuda = "softmax_grad",
    .parse = parse_as<SoftmaxParams>,
};

}  // namespace rill
