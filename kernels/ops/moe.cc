// Mixture of experts, as GShard writes it: tokens in G groups of S, each
// group routed on its own, so a layout that splits the groups (data
// parallel) routes as one device does.
//
// moe_route(logits [G, S, E]) -> gates [G, S, k] f32, slots [G, S, k] i32,
//   dropped [G] f32. Attrs: k (1 or 2), capacity C (tokens an expert takes
//   from a group), normalize (default: k == 2). Each token's k experts and
//   gates as kernels/ops/moe_math.h says; then, first choices before second
//   ones and tokens in order within each, a choice takes its expert's next
//   place c in the group (slot e C + c) while c < C, else it is dropped
//   (slot -1; its gate is kept, and reaches nothing) and counted in
//   `dropped`. With C = S nothing is dropped (dropless). Only the gates are
//   differentiable: moe_route_grad(logits, dgates) -> dlogits.
// moe_dispatch(x [G, S, d], slots[, weights [G, S, k]]) -> [E, G, C, d]:
//   each token's row (times its weight) at each of its slots, zeros where
//   no token is. Attrs: experts E, capacity C.
// moe_combine(y [E, G, C, d], slots[, gates]) -> [G, S, d]: each token's
//   rows at its slots, times their gates, summed.
// moe_gate_grad(y [E, G, C, d], slots, x [G, S, d]) -> [G, S, k]: the dot
//   of each token's row with the row at each of its slots (0 for a dropped
//   choice): the gradient of dispatch's weights and of combine's gates.
//
// SBP: the groups split (S(0) of the tokens, S(1) of the experts' [E, G,
// C, d]), or d split (tensor parallel), or everything B; the data paths are
// linear, so partial sums pass through them. Expert parallelism is the
// experts' tensor split S(0) for the grouped matmul: the boxing between
// S(1) and S(0) is an all-to-all.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/ops/attr_read.h"
#include "kernels/ops/moe_math.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

constexpr int64_t kMaxExperts = 1024;

Status check_route_attrs(const Attrs& attrs, int64_t experts, int64_t group) {
  RILL_ASSIGN_OR_RETURN(const int64_t k, read_int(attrs, "k", 1));
  RILL_ASSIGN_OR_RETURN(const int64_t capacity, read_int(attrs, "capacity", 0));
  if (k < 1 || k > moe::kMaxK || k > experts)
    return invalid_argument("attr 'k' is {}: 1 or 2, and at most the {} experts", k, experts);
  if (capacity < 1) return invalid_argument("attr 'capacity' is {}: the tokens an expert takes from a group, >= 1 (the group's {} take none away)", capacity, group);
  if (capacity > (int64_t{1} << 31) / experts - 1)
    return invalid_argument("attr 'capacity' is {}: {} experts' places must number below 2^31 (slots are i32)",
                            capacity, experts);
  return {};
}

Status infer_route(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  const TensorMeta& logits = in[0];
  if (logits.dtype != DType::kF32 || logits.shape.size() != 3 || logits.shape[2] < 1 || logits.shape[2] > kMaxExperts)
    return invalid_argument("logits must be f32 [groups, tokens, experts] with 1 to {} experts, got {} {}", kMaxExperts,
                            dtype_name(logits.dtype), shape_string(logits.shape));
  RILL_RETURN_IF_ERROR(check_route_attrs(attrs, logits.shape[2], logits.shape[1]));
  const int64_t g = logits.shape[0], s = logits.shape[1], k = attrs.get_int("k", 1);
  out->push_back({{g, s, k}, DType::kF32});
  out->push_back({{g, s, k}, DType::kI32});
  out->push_back({{g}, DType::kF32});
  return {};
}

Status infer_route_grad(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  std::vector<TensorMeta> forward;
  RILL_RETURN_IF_ERROR(infer_route(attrs, in.first(1), &forward));
  if (in[1].dtype != DType::kF32 || in[1].shape != forward[0].shape)
    return invalid_argument("dgates must be f32 {}, got {} {}", shape_string(forward[0].shape), dtype_name(in[1].dtype),
                            shape_string(in[1].shape));
  out->push_back(in[0]);
  return {};
}

// By groups, or whole.
std::vector<SbpSignature> sbp_by_groups(int inputs, int outputs) {
  SbpSignature split, whole;
  split.inputs.assign(static_cast<size_t>(inputs), Sbp::split(0));
  split.outputs.assign(static_cast<size_t>(outputs), Sbp::split(0));
  whole.inputs.assign(static_cast<size_t>(inputs), Sbp::broadcast());
  whole.outputs.assign(static_cast<size_t>(outputs), Sbp::broadcast());
  return {split, whole};
}

std::vector<SbpSignature> sbp_route(const Attrs&, std::span<const TensorMeta>) { return sbp_by_groups(1, 3); }
std::vector<SbpSignature> sbp_route_grad(const Attrs&, std::span<const TensorMeta>) { return sbp_by_groups(2, 1); }

Status grad_route(GradBuilder& g) {
  const std::string dgates = g.output_grad(0);
  if (dgates.empty() || !g.needs_input_grad(0)) return {};
  g.set_input_grad(0, g.add_op("moe_route_grad", {g.input(0), dgates}, g.attrs())[0]);
  return {};
}

// Scratch of route and its gradient: two rows of E (probabilities, and
// the counts of places taken or the probabilities' gradient).
size_t scratch_route(const Attrs&, std::span<const TensorMeta> in) {
  return 2 * static_cast<size_t>(in[0].shape.back()) * sizeof(float);
}

Status cpu_route(KernelContext& ctx) {
  const MoeParams& p = params_of<MoeParams>(ctx);
  const TensorView& logits = ctx.inputs[0];
  const int64_t groups = logits.shape[0], s = logits.shape[1], e = logits.shape[2];
  float* gates = ctx.outputs[0].f32();
  int32_t* slots = ctx.outputs[1].i32();
  float* prob = scratch_as<float>(ctx, 2 * static_cast<size_t>(e));
  if (prob == nullptr) return internal_error("moe_route: {} bytes of scratch for {} experts", ctx.scratch.size(), e);
  int32_t* filled = reinterpret_cast<int32_t*>(prob + e);
  // Each token's experts go in its slots first, then take their places.
  for (int64_t t = 0; t < groups * s; ++t) {
    moe::softmax_row(logits.f32() + t * e, e, prob);
    moe::top_k(prob, e, p.k, slots + t * p.k);
    moe::gates_of(prob, slots + t * p.k, p.k, p.normalize, gates + t * p.k);
  }
  for (int64_t g = 0; g < groups; ++g)
    ctx.outputs[2].f32()[g] = static_cast<float>(moe::place_group(slots + g * s * p.k, s, p.k, e, p.capacity, filled));
  return {};
}

Status cpu_route_grad(KernelContext& ctx) {
  const MoeParams& p = params_of<MoeParams>(ctx);
  const TensorView& logits = ctx.inputs[0];
  const int64_t rows = logits.shape[0] * logits.shape[1], e = logits.shape[2];
  float* prob = scratch_as<float>(ctx, 2 * static_cast<size_t>(e));
  if (prob == nullptr) return internal_error("moe_route_grad: {} bytes of scratch for {} experts", ctx.scratch.size(), e);
  int32_t chosen[moe::kMaxK];
  for (int64_t t = 0; t < rows; ++t) {
    moe::softmax_row(logits.f32() + t * e, e, prob);
    moe::top_k(prob, e, p.k, chosen);
    moe::route_grad_row(prob, chosen, ctx.inputs[1].f32() + t * p.k, p.k, p.normalize, e, prob + e,
                        ctx.outputs[0].f32() + t * e);
  }
  return {};
}

// --- dispatch, combine and the gates' gradient -------------------------------

// slots [G, S, k] i32 and, when given, weights of its shape; x's [G, S] lead.
Status check_slots(std::span<const TensorMeta> in, size_t slots_at, bool weighted, const Shape& tokens) {
  const TensorMeta& slots = in[slots_at];
  if (slots.dtype != DType::kI32 || slots.shape.size() != 3 || slots.shape[0] != tokens[0] ||
      slots.shape[1] != tokens[1] || slots.shape[2] < 1 || slots.shape[2] > moe::kMaxK)
    return invalid_argument("slots must be i32 [{}, {}, k] with k 1 or 2, got {} {}", tokens[0], tokens[1],
                            dtype_name(slots.dtype), shape_string(slots.shape));
  if (weighted && (in[slots_at + 1].dtype != DType::kF32 || in[slots_at + 1].shape != slots.shape))
    return invalid_argument("the weights must be f32 shaped as slots {}, got {} {}", shape_string(slots.shape),
                            dtype_name(in[slots_at + 1].dtype), shape_string(in[slots_at + 1].shape));
  return {};
}

Status check_tokens(const TensorMeta& x, const char* what) {
  if (x.dtype != DType::kF32 || x.shape.size() != 3)
    return invalid_argument("{} must be f32 [groups, tokens, d], got {} {}", what, dtype_name(x.dtype),
                            shape_string(x.shape));
  return {};
}

Status check_experts(const TensorMeta& y, const Shape& tokens) {
  if (y.dtype != DType::kF32 || y.shape.size() != 4 || y.shape[1] != tokens[0] || y.shape[3] != tokens[2])
    return invalid_argument("the experts' rows must be f32 [experts, {}, capacity, {}], got {} {}", tokens[0],
                            tokens[2], dtype_name(y.dtype), shape_string(y.shape));
  return {};
}

Status infer_dispatch(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in.size() != 2 && in.size() != 3) return invalid_argument("takes x, slots and optional weights, got {} inputs", in.size());
  RILL_RETURN_IF_ERROR(check_tokens(in[0], "x"));
  RILL_RETURN_IF_ERROR(check_slots(in, 1, in.size() == 3, in[0].shape));
  RILL_ASSIGN_OR_RETURN(const int64_t experts, read_int(attrs, "experts", 0));
  RILL_ASSIGN_OR_RETURN(const int64_t capacity, read_int(attrs, "capacity", 0));
  if (experts < 1 || capacity < 1 || capacity > (int64_t{1} << 31) / experts - 1)
    return invalid_argument("attrs 'experts' ({}) and 'capacity' ({}) must be >= 1, their places below 2^31 (slots are "
                            "i32)",
                            experts, capacity);
  out->push_back({{experts, in[0].shape[0], capacity, in[0].shape[2]}, DType::kF32});
  return {};
}

Status infer_combine(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in.size() != 2 && in.size() != 3) return invalid_argument("takes y, slots and optional gates, got {} inputs", in.size());
  const TensorMeta& y = in[0];
  if (y.dtype != DType::kF32 || y.shape.size() != 4)
    return invalid_argument("y must be f32 [experts, groups, capacity, d], got {} {}", dtype_name(y.dtype),
                            shape_string(y.shape));
  const Shape tokens = {y.shape[1], in[1].shape.size() == 3 ? in[1].shape[1] : 0, y.shape[3]};
  RILL_RETURN_IF_ERROR(check_slots(in, 1, in.size() == 3, tokens));
  out->push_back({tokens, DType::kF32});
  return {};
}

Status infer_gate_grad(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_tokens(in[2], "x"));
  RILL_RETURN_IF_ERROR(check_experts(in[0], in[2].shape));
  RILL_RETURN_IF_ERROR(check_slots(in, 1, false, in[2].shape));
  out->push_back({in[1].shape, DType::kF32});
  return {};
}

// Inputs by role: 't' tokens [G, S, d], 'e' experts' rows [E, G, C, d], 's'
// slots, 'w' weights or gates [G, S, k]. A split of the groups is axis 0 of
// t, s, w and axis 1 of e; a split of d axis 2 of t and 3 of e.
std::vector<SbpSignature> sbp_roles(const std::string& roles, char output, bool reduces_d) {
  auto groups = [](char r) { return Sbp::split(r == 'e' ? 1 : 0); };
  auto features = [](char r) { return r == 'e' ? Sbp::split(3) : r == 't' ? Sbp::split(2) : Sbp::broadcast(); };
  SbpSignature by_groups, by_features, whole;
  for (char r : roles) {
    by_groups.inputs.push_back(groups(r));
    by_features.inputs.push_back(features(r));
    whole.inputs.push_back(Sbp::broadcast());
  }
  by_groups.outputs = {groups(output)};
  // A split of d: each device's part of every row; a dot over d (the gates'
  // gradient) is then each device's part of the sum.
  by_features.outputs = {reduces_d ? Sbp::partial_sum() : features(output)};
  whole.outputs = {Sbp::broadcast()};
  std::vector<SbpSignature> sigs = {by_groups, by_features, whole};
  // Linear in each float input alone (the others whole): partial sums pass.
  for (size_t i = 0; i < roles.size(); ++i) {
    if (roles[i] == 's') continue;
    SbpSignature partial = whole;
    partial.inputs[i] = Sbp::partial_sum();
    partial.outputs = {Sbp::partial_sum()};
    sigs.push_back(partial);
  }
  return sigs;
}

std::vector<SbpSignature> sbp_dispatch(const Attrs&, std::span<const TensorMeta> in) {
  return sbp_roles(in.size() == 3 ? "tsw" : "ts", 'e', false);
}
std::vector<SbpSignature> sbp_combine(const Attrs&, std::span<const TensorMeta> in) {
  return sbp_roles(in.size() == 3 ? "esw" : "es", 't', false);
}
std::vector<SbpSignature> sbp_gate_grad(const Attrs&, std::span<const TensorMeta>) {
  return sbp_roles("est", 'w', true);
}

Status grad_dispatch(GradBuilder& g) {
  const std::string dout = g.output_grad(0);
  if (dout.empty()) return {};
  const bool weighted = g.num_inputs() == 3;
  if (g.needs_input_grad(0)) {
    std::vector<std::string> in = {dout, g.input(1)};
    if (weighted) in.push_back(g.input(2));
    g.set_input_grad(0, g.add_op("moe_combine", in)[0]);
  }
  if (weighted && g.needs_input_grad(2))
    g.set_input_grad(2, g.add_op("moe_gate_grad", {dout, g.input(1), g.input(0)})[0]);
  return {};
}

Status grad_combine(GradBuilder& g) {
  const std::string dout = g.output_grad(0);
  if (dout.empty()) return {};
  const bool gated = g.num_inputs() == 3;
  const Shape& y = g.meta(g.input(0)).shape;
  if (g.needs_input_grad(0)) {
    std::vector<std::string> in = {dout, g.input(1)};
    if (gated) in.push_back(g.input(2));
    g.set_input_grad(0, g.add_op("moe_dispatch", in, {{"experts", y[0]}, {"capacity", y[2]}})[0]);
  }
  if (gated && g.needs_input_grad(2))
    g.set_input_grad(2, g.add_op("moe_gate_grad", {g.input(0), g.input(1), dout})[0]);
  return {};
}

// Each token's choices in order: f(token, choice, row) with `row` where
// its slot's row starts in the experts' rows [E, G, C, d] (-1: dropped).
// A slot outside [-1, E C) is an error naming it and its place.
template <typename F>
Status for_each_choice(const TensorView& slots, int64_t experts, int64_t capacity, int64_t d, const char* op, F&& f) {
  const int64_t groups = slots.shape[0], s = slots.shape[1], k = slots.shape[2];
  for (int64_t t = 0; t < groups * s; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t slot = slots.i32()[t * k + j];
      if (slot < -1 || slot >= experts * capacity)
        return invalid_argument("op '{}': slot {} at position {} is outside [-1, {})", op, slot, t * k + j,
                                experts * capacity);
      const int64_t e = slot / capacity, c = slot % capacity;
      f(t, j, slot < 0 ? int64_t{-1} : ((e * groups + t / s) * capacity + c) * d);
    }
  return {};
}

Status cpu_dispatch(KernelContext& ctx) {
  const float* x = ctx.inputs[0].f32();
  const float* w = ctx.inputs.size() == 3 ? ctx.inputs[2].f32() : nullptr;
  TensorView& out = ctx.outputs[0];
  const int64_t d = out.shape[3], k = ctx.inputs[1].shape[2];
  std::memset(out.data, 0, out.bytes());
  return for_each_choice(ctx.inputs[1], out.shape[0], out.shape[2], d, "moe_dispatch",
                         [&](int64_t t, int64_t j, int64_t row) {
                           if (row < 0) return;
                           const float weight = w ? w[t * k + j] : 1.0f;
                           for (int64_t i = 0; i < d; ++i) out.f32()[row + i] = weight * x[t * d + i];
                         });
}

Status cpu_combine(KernelContext& ctx) {
  const TensorView& y = ctx.inputs[0];
  const float* gates = ctx.inputs.size() == 3 ? ctx.inputs[2].f32() : nullptr;
  TensorView& out = ctx.outputs[0];
  const int64_t d = y.shape[3], k = ctx.inputs[1].shape[2];
  std::memset(out.data, 0, out.bytes());
  return for_each_choice(ctx.inputs[1], y.shape[0], y.shape[2], d, "moe_combine",
                         [&](int64_t t, int64_t j, int64_t row) {
                           if (row < 0) return;
                           const float gate = gates ? gates[t * k + j] : 1.0f;
                           for (int64_t i = 0; i < d; ++i) out.f32()[t * d + i] += gate * y.f32()[row + i];
                         });
}

Status cpu_gate_grad(KernelContext& ctx) {
  const TensorView& y = ctx.inputs[0];
  const float* x = ctx.inputs[2].f32();
  const int64_t d = y.shape[3], k = ctx.inputs[1].shape[2];
  return for_each_choice(ctx.inputs[1], y.shape[0], y.shape[2], d, "moe_gate_grad",
                         [&](int64_t t, int64_t j, int64_t row) {
                           float dot = 0.0f;
                           for (int64_t i = 0; row >= 0 && i < d; ++i) dot += y.f32()[row + i] * x[t * d + i];
                           ctx.outputs[0].f32()[t * k + j] = dot;
                         });
}

}  // namespace

const OpDef kMoeRouteOp = {.type = "moe_route", .num_inputs = 1, .num_outputs = 3, .infer = infer_route,
                           .sbp = sbp_route, .grad = grad_route, .cpu = cpu_route, .cuda = "moe_route",
                           .scratch_bytes = scratch_route, .parse = parse_as<MoeParams>};
const OpDef kMoeRouteGradOp = {.type = "moe_route_grad", .num_inputs = 2, .infer = infer_route_grad,
                               .sbp = sbp_route_grad, .cpu = cpu_route_grad, .cuda = "moe_route_grad",
                               .scratch_bytes = scratch_route, .parse = parse_as<MoeParams>};
const OpDef kMoeDispatchOp = {.type = "moe_dispatch", .num_inputs = -1, .infer = infer_dispatch,
                              .sbp = sbp_dispatch, .grad = grad_dispatch, .cpu = cpu_dispatch, .cuda = "moe_dispatch"};
const OpDef kMoeCombineOp = {.type = "moe_combine", .num_inputs = -1, .infer = infer_combine, .sbp = sbp_combine,
                             .grad = grad_combine, .cpu = cpu_combine, .cuda = "moe_combine"};
const OpDef kMoeGateGradOp = {.type = "moe_gate_grad", .num_inputs = 3, .infer = infer_gate_grad,
                              .sbp = sbp_gate_grad, .cpu = cpu_gate_grad, .cuda = "moe_gate_grad"};

}  // namespace rill
