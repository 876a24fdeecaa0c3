// attention(q, k, v) -> (y, lse): scaled dot-product attention in one op,
// each query row's softmax over the keys taken a row at a time, so no
// buffer ever holds a [T, S] matrix of scores (the composed form, matmul +
// softmax + matmul, writes two). q [..., T, D], k and v [..., S, D] with the
// same leading axes (batch, heads); y [..., T, D]; lse [..., T] is each
// row's log-sum-exp of its scaled scores, saved for the gradient. Attrs:
// `scale` (> 0; default 1 / sqrt(D)), `causal` (0 or 1; T <= S, row i
// sees keys 0..i) and `zigzag` (q, k and v are in the zigzag order of that
// many parts, kernels/ops/zigzag_math.h: the causal mask compares the
// places it puts them at; T == S, a multiple of 2 zigzag). attention_grad(q, k, v, y, lse, dy) -> (dq, dk, dv)
// recomputes each row's probabilities from lse (FlashAttention's backward):
// with P = softmax(scale q k^T), dv = P^T dy, dP = dy v^T, dS = P * (dP -
// rowsum(dy * y)), dq = scale dS k, dk = scale dS^T q. The leading axes
// split, and so does T with k and v whole (context parallelism: a piece's
// row i is the sequence's offset + i; dk and dv are then each piece's
// partial sums); S and D stay whole (a row needs every key). Under ring
// attention (compiler/ring_expansion.h) k and v are a piece of the sequence
// too, read from another device, and a causal mask compares places in the
// whole sequence: query row i (at q's offset + i) sees key j (at k's
// offset + j) where the key's place is not past the query's. A row that sees
// no key gets y = 0 and lse = -inf (a block of a ring's step wholly in the
// future), which attention_step (attention_ring.cc) weighs as nothing.
#include <algorithm>
#include <vector>

#include "kernels/ops/attention_cpu.h"
#include "kernels/ops/attr_read.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/zigzag_math.h"

namespace rill {

// Splits on each leading axis, or every tensor whole.
std::vector<SbpSignature> leading_splits(int rank, int inputs, int outputs) {
  std::vector<SbpSignature> sigs;
  for (int a = 0; a + 2 < rank; ++a) sigs.push_back(math::uniform_signature(Sbp::split(a), inputs, outputs));
  sigs.push_back(math::uniform_signature(Sbp::broadcast(), inputs, outputs));
  return sigs;
}

namespace {

Status check_attrs(const Attrs& attrs) {
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "causal"));
  RILL_ASSIGN_OR_RETURN(int64_t zigzag, read_int(attrs, "zigzag", 1));
  if (zigzag < 1) return invalid_argument("attr 'zigzag' = {} must be at least 1 (1: the natural order)", zigzag);
  if (attrs.has("scale")) {
    RILL_ASSIGN_OR_RETURN(double scale, read_float(attrs, "scale", 0.0));
    if (!(scale > 0)) return invalid_argument("attr 'scale' is {}; it must be > 0", scale);
  }
  return {};
}

// q [..., T, D], k and v [..., S, D], the same leading axes; causal: S == T.
Status check_qkv(const Attrs& attrs, const TensorMeta& q, const TensorMeta& k, const TensorMeta& v) {
  for (const TensorMeta* m : {&q, &k, &v})
    if (m->dtype != DType::kF32 || m->shape.size() < 2)
      return invalid_argument("q {}, k {} and v {} must be f32 with at least 2 axes ([..., T, D])",
                              shape_string(q.shape), shape_string(k.shape), shape_string(v.shape));
  const size_t r = q.shape.size();
  const Shape lead(q.shape.begin(), q.shape.end() - 2);
  const bool same = k.shape.size() == r && v.shape == k.shape && Shape(k.shape.begin(), k.shape.end() - 2) == lead &&
                    k.shape[r - 1] == q.shape[r - 1];
  if (!same)
    return invalid_argument("k {} and v {} must be [..., S, D] with q {}'s leading axes and D", shape_string(k.shape),
                            shape_string(v.shape), shape_string(q.shape));
  // A piece of the queries (context parallelism) has fewer than the keys.
  if (attrs.get_int("causal", 0) != 0 && k.shape[r - 2] < q.shape[r - 2])
    return invalid_argument("causal: q {} and k {} must have at least as many keys as queries", shape_string(q.shape),
                            shape_string(k.shape));
  return check_attrs(attrs);
}

Status infer_attention(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_qkv(attrs, in[0], in[1], in[2]));
  out->push_back(in[0]);
  out->push_back({Shape(in[0].shape.begin(), in[0].shape.end() - 1), DType::kF32});
  return {};
}

Status infer_attention_grad(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_qkv(attrs, in[0], in[1], in[2]));
  const Shape rows(in[0].shape.begin(), in[0].shape.end() - 1);
  if (in[3].shape != in[0].shape || in[5].shape != in[0].shape || in[4].shape != rows || in[3].dtype != DType::kF32 ||
      in[4].dtype != DType::kF32 || in[5].dtype != DType::kF32)
    return invalid_argument("y {} and dy {} must be f32 like q {}, lse {} f32 {}", shape_string(in[3].shape),
                            shape_string(in[5].shape), shape_string(in[0].shape), shape_string(in[4].shape),
                            shape_string(rows));
  out->push_back(in[0]);
  out->push_back(in[1]);
  out->push_back(in[2]);
  return {};
}


// Context parallelism: the queries split along the sequence, the keys and
// values whole on every device (a causal mask reads the piece's offset).
std::vector<SbpSignature> sbp_attention(const Attrs&, std::span<const TensorMeta> in) {
  const int rank = static_cast<int>(in[0].shape.size());
  auto sigs = leading_splits(rank, 3, 2);
  const Sbp seq = Sbp::split(rank - 2), b = Sbp::broadcast();
  sigs.push_back({{seq, b, b}, {seq, seq}});
  return sigs;
}

std::vector<SbpSignature> sbp_attention_grad(const Attrs&, std::span<const TensorMeta> in) {
  const int rank = static_cast<int>(in[0].shape.size());
  auto sigs = leading_splits(rank, 6, 3);
  // Linear in dy once y and lse are fixed.
  const Sbp b = Sbp::broadcast(), p = Sbp::partial_sum(), seq = Sbp::split(rank - 2);
  sigs.push_back({{b, b, b, b, b, p}, {p, p, p}});
  // The queries' piece of the sequence: its own dq, and its share of the
  // keys' and values' gradients.
  sigs.push_back({{seq, b, b, seq, seq, seq}, {seq, p, p}});
  return sigs;
}

// Ring attention: queries, keys and values all split along the sequence
// (compiler/ring_expansion.h passes the keys' and values' pieces around).
std::vector<SbpSignature> ring_attention(const Attrs&, std::span<const TensorMeta> in) {
  const Sbp seq = Sbp::split(static_cast<int>(in[0].shape.size()) - 2);
  return {math::uniform_signature(seq, 3, 2)};
}

std::vector<SbpSignature> ring_attention_grad(const Attrs&, std::span<const TensorMeta> in) {
  const Sbp seq = Sbp::split(static_cast<int>(in[0].shape.size()) - 2);
  return {math::uniform_signature(seq, 6, 3)};
}

Status grad_attention(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty()) return {};
  Attrs attrs;
  attrs.set("causal", g.attrs().get_int("causal", 0));
  if (g.attrs().has("zigzag")) attrs.set("zigzag", g.attrs().get_int("zigzag", 1));
  if (g.attrs().has("scale")) attrs.set("scale", g.attrs().get_float("scale", 0.0));
  const auto grads =
      g.add_op("attention_grad", {g.input(0), g.input(1), g.input(2), g.output(0), g.output(1), dy}, attrs, 3);
  for (int i = 0; i < 3; ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, grads[static_cast<size_t>(i)]);
  return {};
}

}  // namespace

// A row of scores: S floats of compute scratch (an act allocates nothing).
size_t scratch_attention(const Attrs&, std::span<const TensorMeta> in) {
  return static_cast<size_t>(in[1].shape[in[1].shape.size() - 2]) * sizeof(float);
}

namespace {

float* row_buffer(const KernelContext& ctx, int64_t s) { return scratch_as<float>(ctx, static_cast<size_t>(s)); }

float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Row i's scaled scores against keys [0, n) into `scores`; returns their max.
float row_scores(const float* q, const float* k, int64_t n, int64_t d, float scale, float* scores) {
  float top = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = scale * dot(q, k + j * d, d);
    top = std::max(top, scores[j]);
  }
  return top;
}

// Where a causal mask puts q's rows and k's keys in the whole sequence:
// each piece's index in it, and the order it is in (zigzag_math.h; the
// natural one unless the compiler balanced a ring). A whole k is aligned
// top-left with the queries (T <= S), so rows must not pass the keys; a
// piece of k (ring attention) may lie anywhere.
struct CausalPlaces {
  bool causal = false;
  int64_t first_query = 0, first_key = 0;
  Zigzag order;
  // Calls fn(begin, end) for each run [begin, end) of the piece's s keys
  // that row i sees: in order, those whose place is not past the row's
  // (a prefix of each run of consecutive places), or all when not causal.
  template <typename Fn>
  void visible(int64_t i, int64_t s, Fn&& fn) const {
    if (!causal) {
      fn(int64_t{0}, s);
      return;
    }
    const int64_t place = order.place(first_query + i);
    for (int64_t j = 0; j < s;) {
      const int64_t run = order.run(first_key + j, s - j);
      const int64_t seen = std::clamp<int64_t>(place - order.place(first_key + j) + 1, 0, run);
      if (seen > 0) fn(j, j + seen);
      j += run;
    }
  }
};

StatusOr<CausalPlaces> causal_places(const KernelContext& ctx, const AttentionShape& n, const char* op) {
  const AttentionParams& p = params_of<AttentionParams>(ctx);
  if (!p.causal) return CausalPlaces{};
  const size_t axis = ctx.inputs[0].shape.size() - 2;
  const int64_t length = ctx.logical_inputs.empty() ? n.t : ctx.logical_inputs[0][axis];
  const CausalPlaces c{true, query_offset(ctx, axis), piece_offset(ctx, 1, axis), Zigzag{length, p.zigzag}};
  const int64_t keys = ctx.logical_inputs.size() < 2 ? n.s : ctx.logical_inputs[1][axis];
  // Checked here, on the whole tensors' shapes (infer may see pieces).
  if (!c.order.natural() && (keys != length || length % (2 * p.zigzag) != 0))
    return invalid_argument(
        "op '{}': attr 'zigzag' = {}: a causal mask in the zigzag order takes as many keys as queries, their "
        "number a multiple of {}; got {} queries and {} keys",
        op, p.zigzag, 2 * p.zigzag, length, keys);
  const bool whole_keys = keys <= n.s;
  if (whole_keys && c.order.natural() && c.first_query + n.t > n.s)
    return internal_error("op '{}': causal rows {} to {} pass the {} keys", op, c.first_query, c.first_query + n.t, n.s);
  return c;
}

}  // namespace

Status cpu_attention(KernelContext& ctx) {
  const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
  const AttentionShape n = AttentionShape::of(q.shape, k.shape);
  const float scale = params_of<AttentionParams>(ctx).scale_for(n.d);
  RILL_ASSIGN_OR_RETURN(const CausalPlaces places, causal_places(ctx, n, "attention"));
  float* scores = row_buffer(ctx, n.s);
  if (scores == nullptr) return internal_error("attention: {} bytes of scratch for a row of {} scores", ctx.scratch.size(), n.s);
  for (int64_t h = 0; h < n.heads; ++h) {
    const float* kh = k.f32() + h * n.s * n.d;
    const float* vh = v.f32() + h * n.s * n.d;
    for (int64_t i = 0; i < n.t; ++i) {
      float* y = ctx.outputs[0].f32() + (h * n.t + i) * n.d;
      std::fill_n(y, n.d, 0.0f);
      const float* qi = q.f32() + (h * n.t + i) * n.d;
      float top = -INFINITY;
      bool seen = false;
      places.visible(i, n.s, [&](int64_t b, int64_t e) {
        top = std::max(top, row_scores(qi, kh + b * n.d, e - b, n.d, scale, scores + b));
        seen = true;
      });
      if (!seen) {  // every key in the row's future: no weight
        ctx.outputs[1].f32()[h * n.t + i] = -INFINITY;
        continue;
      }
      float sum = 0.0f;
      places.visible(i, n.s, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) sum += scores[j] = std::exp(scores[j] - top);
      });
      places.visible(i, n.s, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j)
          for (int64_t c = 0; c < n.d; ++c) y[c] += scores[j] * vh[j * n.d + c];
      });
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < n.d; ++c) y[c] *= inv;
      ctx.outputs[1].f32()[h * n.t + i] = top + std::log(sum);
    }
  }
  return {};
}

Status cpu_attention_grad(KernelContext& ctx) {
  const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
  const AttentionShape n = AttentionShape::of(q.shape, k.shape);
  const float scale = params_of<AttentionParams>(ctx).scale_for(n.d);
  RILL_ASSIGN_OR_RETURN(const CausalPlaces places, causal_places(ctx, n, "attention_grad"));
  std::fill_n(ctx.outputs[0].f32(), ctx.outputs[0].size(), 0.0f);
  std::fill_n(ctx.outputs[1].f32(), ctx.outputs[1].size(), 0.0f);
  std::fill_n(ctx.outputs[2].f32(), ctx.outputs[2].size(), 0.0f);
  float* probs = row_buffer(ctx, n.s);
  if (probs == nullptr) return internal_error("attention_grad: {} bytes of scratch for a row of {} scores", ctx.scratch.size(), n.s);
  for (int64_t h = 0; h < n.heads; ++h) {
    const float* kh = k.f32() + h * n.s * n.d;
    const float* vh = v.f32() + h * n.s * n.d;
    float* dk = ctx.outputs[1].f32() + h * n.s * n.d;
    float* dv = ctx.outputs[2].f32() + h * n.s * n.d;
    for (int64_t i = 0; i < n.t; ++i) {
      const int64_t row = h * n.t + i;
      const float* qi = q.f32() + row * n.d;
      const float* dy = ctx.inputs[5].f32() + row * n.d;
      const float lse = ctx.inputs[4].f32()[row];
      const float delta = dot(dy, ctx.inputs[3].f32() + row * n.d, n.d);
      float* dq = ctx.outputs[0].f32() + row * n.d;
      places.visible(i, n.s, [&](int64_t b, int64_t e) {
        row_scores(qi, kh + b * n.d, e - b, n.d, scale, probs + b);
        for (int64_t j = b; j < e; ++j) {
          const float pj = std::exp(probs[j] - lse);
          const float ds = pj * (dot(dy, vh + j * n.d, n.d) - delta);
          for (int64_t c = 0; c < n.d; ++c) {
            dq[c] += scale * ds * kh[j * n.d + c];
            dk[j * n.d + c] += scale * ds * qi[c];
            dv[j * n.d + c] += pj * dy[c];
          }
        }
      });
    }
  }
  return {};
}


const OpDef kAttentionOp = {
    .type = "attention",
    .num_inputs = 3,
    .num_outputs = 2,
    .infer = infer_attention,
    .sbp = sbp_attention,
    .ring_sbp = ring_attention,
    .grad = grad_attention,
    .cpu = cpu_attention,
    .cuda = "attention",
    .scratch_bytes = scratch_attention,
    .parse = parse_as<AttentionParams>,
};

const OpDef kAttentionGradOp = {
    .type = "attention_grad",
    .num_inputs = 6,
    .num_outputs = 3,
    .infer = infer_attention_grad,
    .sbp = sbp_attention_grad,
    .ring_sbp = ring_attention_grad,
    .cpu = cpu_attention_grad,
    .cuda = "attention_grad",
    .scratch_bytes = scratch_attention,
    .parse = parse_as<AttentionParams>,
};

}  // namespace rill
