// matmul: C = op(A) op(B), where op transposes the last two axes when the int
// attrs transpose_a / transpose_b are 1. Three layouts (math::matmul_shape):
//   a [M, K] x b [K, N] -> [M, N];
//   a [..., M, K] x b [K, N] -> [..., M, N]: b shared over a's leading axes
//     (a linear layer on [B, T, C] activations), one GEMM over folded rows;
//   a [..., M, K] x b [..., K, N] -> [..., M, N], equal leading axes (batched
//     matmul: attention's [B, H, T, D] products).
// With the int attr fold_batch 1 (transpose_a 1, a [..., K, M] and b
// [..., K, N] of one shape but the last axis) every axis but the last is
// summed over: C [M, N] = sum over the leading indices of A_i^T B_i, one GEMM
// over the folded rows; the gradient of a weight shared over a batch, split
// batches giving partial sums.
// The CPU kernel is one cblas_sgemm per GEMM (OpenBLAS 0.3.21 has no batched
// call). With the int attr micro_batches (K' >= 1; the compiler sets it on a
// weight gradient under gradient accumulation) the actor acts once per
// micro-batch on one output: C = op(A) op(B) / K' at micro-batch 0 and
// C += op(A) op(B) / K' after, the mean over the step's micro-batches, as the
// accumulate op.
#include <cblas.h>

#include <algorithm>

#include "kernels/ops/math_util.h"
#include "kernels/ops/matmul_shape.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

struct Flags {
  bool ta, tb, fold;
};

Flags flags(const Attrs& attrs) {
  return {attrs.get_int("transpose_a", 0) != 0, attrs.get_int("transpose_b", 0) != 0,
          attrs.get_int("fold_batch", 0) != 0};
}

Status infer_folded(Flags f, const Shape& a, const Shape& b, std::vector<TensorMeta>* out) {
  if (!f.ta || f.tb || a.size() < 2 || a.size() != b.size() || !std::equal(a.begin(), a.end() - 1, b.begin()))
    return invalid_argument(
        "fold_batch: a {} and b {} must be [..., K, M] and [..., K, N] with transpose_a=1 and transpose_b=0",
        shape_string(a), shape_string(b));
  out->push_back({{a.back(), b.back()}, DType::kF32});
  return {};
}

std::string transposes_note(Flags f) {
  return f.ta || f.tb ? fmt::format(" with transpose_a={} transpose_b={}", int(f.ta), int(f.tb)) : std::string();
}

Status infer_matmul(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "transpose_a"));
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "transpose_b"));
  if (attrs.has("micro_batches") && attrs.get_int("micro_batches", 0) < 1)
    return invalid_argument("micro_batches is {}, expected at least 1", attrs.get_int("micro_batches", 0));
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  if (in[0].dtype != in[1].dtype || !is_float(in[0].dtype))
    return invalid_argument("a and b must be both f32, both bf16 or both f16, got {} and {}", dtype_name(in[0].dtype),
                            dtype_name(in[1].dtype));
  const Flags f = flags(attrs);
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "fold_batch"));
  if (f.fold) return infer_folded(f, a, b, out);
  if (a.size() < 2 || b.size() < 2 || (b.size() > 2 && b.size() != a.size()))
    return invalid_argument(
        "a {} and b {}: a must have 2 or more axes, and b 2 (a weight shared over a's leading axes) or as many as a",
        shape_string(a), shape_string(b));
  if (b.size() > 2 && !std::equal(a.begin(), a.end() - 2, b.begin()))
    return invalid_argument("a {} and b {} differ in their leading (batch) axes", shape_string(a), shape_string(b));
  if (b.size() == 2 && a.size() > 2 && f.ta)
    return invalid_argument("a {} with transpose_a=1 and a 2-D b {}: transpose_a on a batch needs a batched b",
                            shape_string(a), shape_string(b));
  const math::MatmulShape s = math::matmul_shape(a, b, f.ta, f.tb);
  const int64_t b_k = f.tb ? b[b.size() - 1] : b[b.size() - 2];
  if (s.k != b_k)
    return invalid_argument("a {} and b {} do not agree on K ({} vs {}){}", shape_string(a), shape_string(b), s.k,
                            b_k, transposes_note(f));
  Shape c(a.begin(), a.end() - 2);
  c.push_back(f.ta ? a[a.size() - 1] : a[a.size() - 2]);
  c.push_back(s.n);
  out->push_back({std::move(c), DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_matmul(const Attrs& attrs, std::span<const TensorMeta> in) {
  const Flags f = flags(attrs);
  const int ra = static_cast<int>(in[0].shape.size()), rb = static_cast<int>(in[1].shape.size());
  const int nb = ra - 2;  // leading axes of a (and of c)
  const int a_m = nb + (f.ta ? 1 : 0), a_k = nb + (f.ta ? 0 : 1);
  const int b_k = rb - 2 + (f.tb ? 1 : 0), b_n = rb - 2 + (f.tb ? 0 : 1);
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  std::vector<SbpSignature> sigs;
  if (f.fold) {  // every axis but the last is summed over: split alike, partial sums
    for (int i = 0; i + 1 < ra; ++i) sigs.push_back({{Sbp::split(i), Sbp::split(i)}, {P}});
    sigs.push_back({{Sbp::split(ra - 1), B}, {Sbp::split(0)}});
    sigs.push_back({{B, Sbp::split(rb - 1)}, {Sbp::split(1)}});
    sigs.push_back({{P, B}, {P}});
    sigs.push_back({{B, P}, {P}});
    sigs.push_back({{B, B}, {B}});
    return sigs;
  }
  // A leading axis splits a (and b, when batched) and c alike.
  for (int i = 0; i < nb; ++i) sigs.push_back({{Sbp::split(i), rb > 2 ? Sbp::split(i) : B}, {Sbp::split(i)}});
  sigs.push_back({{Sbp::split(a_m), B}, {Sbp::split(nb)}});
  sigs.push_back({{B, Sbp::split(b_n)}, {Sbp::split(nb + 1)}});
  sigs.push_back({{Sbp::split(a_k), Sbp::split(b_k)}, {P}});
  sigs.push_back({{P, B}, {P}});
  sigs.push_back({{B, P}, {P}});
  sigs.push_back({{B, B}, {B}});
  return sigs;
}

// `x` in `dtype`: the f32 gradient cast to the 16-bit dtype of the forward's
// inputs (a product takes both operands in one dtype).
std::string in_dtype(GradBuilder& g, const std::string& x, DType dtype) {
  if (g.meta(x).dtype == dtype) return x;
  return g.add_op("cast", {x}, {{"dtype", std::string(dtype_name(dtype))}})[0];
}

std::string matmul(GradBuilder& g, const std::string& x, const std::string& y, int ta, int tb) {
  return g.add_op("matmul", {x, y}, {{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}})[0];
}

// x^T y summed over every axis but the last (fold_batch).
std::string folded(GradBuilder& g, const std::string& x, const std::string& y) {
  return g.add_op("matmul", {x, y},
                  {{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{0}}, {"fold_batch", int64_t{1}}})[0];
}

// With C = op(A) op(B) (per batch when batched):
//   (A, B)     dA = dC B^T        dB = A^T dC
//   (A, B^T)   dA = dC B          dB = dC^T A
//   (A^T, B)   dA = B dC^T        dB = A dC
//   (A^T, B^T) dA = B^T dC^T      dB = dC^T A^T
// A b shared over a's leading axes gets the sum over them: a fold_batch
// matmul, one GEMM over the folded rows (split rows: partial sums). With
// 16-bit inputs dC is cast to their dtype and the gradients come out f32,
// as every product's output (mixed precision: the cast ops before the
// forward's inputs pass them back as they are).
Status grad_matmul(GradBuilder& g) {
  std::string dc = g.output_grad(0);
  if (dc.empty()) return {};
  dc = in_dtype(g, dc, g.meta(g.input(0)).dtype);
  const Flags f = flags(g.attrs());
  if (f.fold) return invalid_argument("matmul with fold_batch has no gradient rule (it is a gradient)");
  const std::string& a = g.input(0);
  const std::string& b = g.input(1);
  if (g.needs_input_grad(0)) {
    std::string da;
    if (!f.ta) da = f.tb ? matmul(g, dc, b, 0, 0) : matmul(g, dc, b, 0, 1);
    else da = f.tb ? matmul(g, b, dc, 1, 1) : matmul(g, b, dc, 0, 1);
    g.set_input_grad(0, da);
  }
  if (g.needs_input_grad(1)) {
    const bool shared = g.meta(b).shape.size() == 2 && g.meta(a).shape.size() > 2;  // then !f.ta
    std::string db;
    if (shared) db = f.tb ? folded(g, dc, a) : folded(g, a, dc);
    else if (!f.ta) db = f.tb ? matmul(g, dc, a, 1, 0) : matmul(g, a, dc, 1, 0);
    else db = f.tb ? matmul(g, dc, a, 1, 1) : matmul(g, a, dc, 0, 0);
    g.set_input_grad(1, db);
  }
  return {};
}

Status cpu_matmul(KernelContext& ctx) {
  const MatmulParams& p = params_of<MatmulParams>(ctx);
  const Flags f{p.transpose_a, p.transpose_b, p.fold_batch};
  const TensorView& a = ctx.inputs[0];
  const TensorView& b = ctx.inputs[1];
  TensorView& c = ctx.outputs[0];
  const math::MatmulShape s = math::matmul_shape(a.shape, b.shape, f.ta, f.tb, f.fold);
  if (c.size() == 0) return {};
  // Accumulating over micro-batches: scaled by 1/K', added after the first.
  const int64_t micro_batches = p.micro_batches;
  const bool add = micro_batches > 1 && ctx.micro > 0;
  if (s.k == 0) {  // an empty split piece along K contributes zeros
    if (!add) std::fill_n(c.f32(), c.size(), 0.0f);
    return {};
  }
  const float alpha = 1.0f / static_cast<float>(micro_batches), beta = add ? 1.0f : 0.0f;
  // 16-bit inputs are widened into the scratch first (exact), then
  // multiplied in f32 as f32 inputs are.
  const float* av = a.f32();
  const float* bv = b.f32();
  if (a.dtype != DType::kF32) {
    float* __restrict wide = reinterpret_cast<float*>(ctx.scratch.data());
    const int64_t na = a.size(), nb = b.size();  // counted once: the loops below vectorize
    visit_dtype(a.dtype, [&]<typename T>(std::type_identity<T>) {
      const T* __restrict x = static_cast<const T*>(a.data);
      for (int64_t i = 0; i < na; ++i) wide[i] = float_of(x[i]);
      const T* __restrict y = static_cast<const T*>(b.data);
      for (int64_t i = 0; i < nb; ++i) wide[na + i] = float_of(y[i]);
    });
    av = wide;
    bv = wide + na;
  }
  for (int64_t i = 0; i < s.batch; ++i)
    cblas_sgemm(CblasRowMajor, f.ta ? CblasTrans : CblasNoTrans, f.tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), alpha, av + i * s.stride_a,
                static_cast<int>(s.lda), bv + i * s.stride_b, static_cast<int>(s.ldb), beta,
                c.f32() + i * s.stride_c, static_cast<int>(s.ldc));
  return {};
}

// 16-bit inputs: room for both as f32.
size_t scratch_matmul(const Attrs&, std::span<const TensorMeta> in) {
  if (in[0].dtype == DType::kF32) return 0;
  return static_cast<size_t>(num_elements(in[0].shape) + num_elements(in[1].shape)) * sizeof(float);
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
    .cuda = "matmul",
    .scratch_bytes = scratch_matmul,
    .parse = parse_as<MatmulParams>,
};

}  // namespace rill
