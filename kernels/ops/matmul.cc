// matmul: y[M, N] = op(a) x op(b), where op transposes when the int attrs
// transpose_a / transpose_b are 1. a is [M, K] ([K, M] transposed), b is
// [K, N] ([N, K] transposed). The CPU kernel is one cblas_sgemm.
// With the int attr micro_batches (K' >= 1; the compiler sets it on a weight
// gradient under gradient accumulation) the actor acts once per micro-batch on
// one output: y = op(a) op(b) / K' at micro-batch 0 and y += op(a) op(b) / K'
// after, the mean over the step's micro-batches, as the accumulate op.
#include <cblas.h>

#include <algorithm>

#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

struct MatmulAxes {
  bool transpose_a, transpose_b;
  int a_m, a_k, b_k, b_n;  // which axis of a / b holds M, K, N
};

MatmulAxes matmul_axes(const Attrs& attrs) {
  bool ta = attrs.get_int("transpose_a", 0) != 0, tb = attrs.get_int("transpose_b", 0) != 0;
  return {ta, tb, ta ? 1 : 0, ta ? 0 : 1, tb ? 1 : 0, tb ? 0 : 1};
}

Status infer_matmul(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "transpose_a"));
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "transpose_b"));
  if (attrs.has("micro_batches") && attrs.get_int("micro_batches", 0) < 1)
    return invalid_argument("micro_batches is {}, expected at least 1", attrs.get_int("micro_batches", 0));
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  if (a.size() != 2 || b.size() != 2)
    return invalid_argument("a {} and b {} must both be 2-D", shape_string(a), shape_string(b));
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("a and b must be f32, got {} and {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  MatmulAxes ax = matmul_axes(attrs);
  if (a[ax.a_k] != b[ax.b_k])
    return invalid_argument("a {} and b {} do not agree on K ({} vs {}){}", shape_string(a), shape_string(b),
                            a[ax.a_k], b[ax.b_k],
                            ax.transpose_a || ax.transpose_b
                                ? fmt::format(" with transpose_a={} transpose_b={}", int(ax.transpose_a),
                                              int(ax.transpose_b))
                                : std::string());
  out->push_back({{a[ax.a_m], b[ax.b_n]}, DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_matmul(const Attrs& attrs, std::span<const TensorMeta>) {
  MatmulAxes ax = matmul_axes(attrs);
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  return {
      {{Sbp::split(ax.a_m), B}, {Sbp::split(0)}},
      {{B, Sbp::split(ax.b_n)}, {Sbp::split(1)}},
      {{Sbp::split(ax.a_k), Sbp::split(ax.b_k)}, {P}},
      {{P, B}, {P}},
      {{B, P}, {P}},
      {{B, B}, {B}},
  };
}

std::string matmul(GradBuilder& g, const std::string& x, const std::string& y, int ta, int tb) {
  return g.add_op("matmul", {x, y}, {{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}})[0];
}

// With C = op(A) op(B):
//   (A, B)     dA = dC B^T        dB = A^T dC
//   (A, B^T)   dA = dC B          dB = dC^T A
//   (A^T, B)   dA = B dC^T        dB = A dC
//   (A^T, B^T) dA = B^T dC^T      dB = dC^T A^T
Status grad_matmul(GradBuilder& g) {
  const std::string dc = g.output_grad(0);
  if (dc.empty()) return {};
  MatmulAxes ax = matmul_axes(g.attrs());
  const std::string& a = g.input(0);
  const std::string& b = g.input(1);
  if (g.needs_input_grad(0)) {
    std::string da;
    if (!ax.transpose_a) da = ax.transpose_b ? matmul(g, dc, b, 0, 0) : matmul(g, dc, b, 0, 1);
    else da = ax.transpose_b ? matmul(g, b, dc, 1, 1) : matmul(g, b, dc, 0, 1);
    g.set_input_grad(0, da);
  }
  if (g.needs_input_grad(1)) {
    std::string db;
    if (!ax.transpose_a) db = ax.transpose_b ? matmul(g, dc, a, 1, 0) : matmul(g, a, dc, 1, 0);
    else db = ax.transpose_b ? matmul(g, dc, a, 1, 1) : matmul(g, a, dc, 0, 0);
    g.set_input_grad(1, db);
  }
  return {};
}

Status cpu_matmul(KernelContext& ctx) {
  MatmulAxes ax = matmul_axes(*ctx.attrs);
  const TensorView& a = ctx.inputs[0];
  const TensorView& b = ctx.inputs[1];
  TensorView& c = ctx.outputs[0];
  const int m = static_cast<int>(c.shape[0]), n = static_cast<int>(c.shape[1]);
  const int k = static_cast<int>(a.shape[ax.a_k]);
  if (m == 0 || n == 0) return {};
  // Accumulating over micro-batches: scaled by 1/K', added after the first.
  const int64_t micro_batches = ctx.attrs->get_int("micro_batches", 1);
  const bool add = micro_batches > 1 && ctx.micro > 0;
  if (k == 0) {  // an empty split piece along K contributes zeros
    if (!add) std::fill_n(c.f32(), c.size(), 0.0f);
    return {};
  }
  const int lda = static_cast<int>(a.shape[1]), ldb = static_cast<int>(b.shape[1]);
  cblas_sgemm(CblasRowMajor, ax.transpose_a ? CblasTrans : CblasNoTrans, ax.transpose_b ? CblasTrans : CblasNoTrans,
              m, n, k, 1.0f / static_cast<float>(micro_batches), a.f32(), lda, b.f32(), ldb, add ? 1.0f : 0.0f,
              c.f32(), n);
  return {};
}

}  // namespace

const OpDef kMatmulOp = {
    .type = "matmul",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_matmul,
    .sbp = sbp_matmul,
    .grad = grad_matmul,
    .cpu = cpu_matmul,
};

}  // namespace rill
