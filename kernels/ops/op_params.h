// The ops' attributes as their kernels read them, for the CPU and CUDA
// kernels alike: each struct's `read` takes an op's Attrs, already checked
// by the op's infer, and is run once, when the op's task is built
// (OpDef::parse, parse_as below); an act reads fields, never a map by name.
// Initializers read their Attrs directly: they act once.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/attrs.h"
#include "kernels/op.h"
#include "kernels/ops/lr_schedule.h"

namespace rill {

// OpDef::parse of an op whose kernels read `T`.
template <typename T>
StatusOr<OpParams> parse_as(const Attrs& attrs) {
  return OpParams(std::make_shared<const T>(T::read(attrs)));
}

// The params of the op a kernel runs for (its OpDef::parse's `T`).
template <typename T>
const T& params_of(const KernelContext& ctx) {
  return *static_cast<const T*>(ctx.params);
}

// A kernel's scratch (OpDef::scratch_bytes) as `count` values of T, or
// nullptr where it holds fewer (a kernel allocates nothing as it acts).
template <typename T>
T* scratch_as(const KernelContext& ctx, size_t count) {
  return ctx.scratch.size() >= count * sizeof(T) ? reinterpret_cast<T*>(ctx.scratch.data()) : nullptr;
}

// An ints attr that is a list, or one int (as a one-element list), or absent.
inline std::vector<int64_t> ints_or_one(const Attrs& attrs, const std::string& name) {
  const auto& values = attrs.values();
  const auto it = values.find(name);
  if (it == values.end()) return {};
  if (const auto* list = std::get_if<std::vector<int64_t>>(&it->second)) return *list;
  if (const auto* one = std::get_if<int64_t>(&it->second)) return {*one};
  return {};
}

struct MatmulParams {
  bool transpose_a = false, transpose_b = false, fold_batch = false;
  int64_t micro_batches = 1;  // > 1: the weight gradient's mean over the step's micro-batches
  static MatmulParams read(const Attrs& a) {
    return {a.get_int("transpose_a", 0) != 0, a.get_int("transpose_b", 0) != 0, a.get_int("fold_batch", 0) != 0,
            a.get_int("micro_batches", 1)};
  }
};

struct BiasAddParams {
  bool has_axis = false;  // else the last rank(bias) axes
  int64_t axis = 0;
  static BiasAddParams read(const Attrs& a) { return {a.has("axis"), a.get_int("axis", 0)}; }
  int64_t axis_for(const Shape& x, const Shape& b) const {
    return has_axis ? axis : static_cast<int64_t>(x.size()) - static_cast<int64_t>(b.size());
  }
};

// scale's factor; the collectives' finishing scale (the mean's 1 / ranks).
struct ScaleParams {
  double scale = 1.0;
  static ScaleParams read(const Attrs& a) { return {a.get_float("scale", 1.0)}; }
};

// The loss_scale ops: the first scale's exponent (attr `scale` = 2^exponent)
// and the update's window.
struct LossScaleParams {
  int exponent = 0;
  int64_t window = 2000;
  static LossScaleParams read(const Attrs& a) {
    int e = 1;
    std::frexp(a.get_float("scale", 1.0), &e);
    return {e - 1, a.get_int("window", 2000)};
  }
};

struct AccumulateParams {
  int64_t micro_batches = 1;
  static AccumulateParams read(const Attrs& a) { return {a.get_int("micro_batches", 1)}; }
};

// reduce_sum, reduce_mean and broadcast_like: the axes (empty: all).
struct ReduceParams {
  std::vector<int64_t> axes;
  bool mean = false;  // broadcast_like: the gradient of a mean
  static ReduceParams read(const Attrs& a) { return {ints_or_one(a, "axes"), a.get_int("mean", 0) != 0}; }
};

struct SoftmaxParams {
  bool causal = false;
  float scale = 1.0f;
  static SoftmaxParams read(const Attrs& a) {
    return {a.get_int("causal", 0) != 0, static_cast<float>(a.get_float("scale", 1.0))};
  }
};

// attention: `scale` 0 means 1 / sqrt(head size), the usual.
struct AttentionParams {
  bool causal = false;
  float scale = 0.0f;
  int64_t zigzag = 1;  // the sequence's order: zigzag over this many parts (kernels/ops/zigzag_math.h)
  static AttentionParams read(const Attrs& a) {
    return {a.get_int("causal", 0) != 0, static_cast<float>(a.get_float("scale", 0.0)), a.get_int("zigzag", 1)};
  }
  float scale_for(int64_t head_size) const {
    return scale > 0 ? scale : 1.0f / std::sqrt(static_cast<float>(head_size));
  }
};

// attention's q [..., T, D] and k [..., S, D]: the stacks (the leading
// axes' product), T, S and D, as its CPU and CUDA kernels read them.
// Context parallelism: where input `input`'s piece starts on axis `axis` of
// its whole tensor; 0 for a whole tensor. A causal mask reads it: the
// queries' offset (attention's q, a causal softmax's scores), and under ring
// attention the keys' too (compiler/ring_expansion.h), whose piece may lie
// anywhere in the sequence. A whole tensor is at 0 whatever its offset says
// (the mirrored view gives each rank's whole tensor an offset on axis 0,
// for dropout's draws).
inline int64_t piece_offset(const KernelContext& ctx, size_t input, size_t axis) {
  if (ctx.input_offsets.size() <= input || ctx.input_offsets[input].size() <= axis ||
      ctx.logical_inputs.size() <= input || ctx.logical_inputs[input].size() <= axis ||
      ctx.logical_inputs[input][axis] <= ctx.inputs[input].shape[axis])
    return 0;
  return ctx.input_offsets[input][axis];
}

// The queries' offset: input 0's (see piece_offset).
inline int64_t query_offset(const KernelContext& ctx, size_t axis) { return piece_offset(ctx, 0, axis); }

struct AttentionShape {
  int64_t heads, t, s, d;
  static AttentionShape of(const Shape& q, const Shape& k) {
    const size_t r = q.size();
    const int64_t t = q[r - 2], d = q[r - 1];
    int64_t heads = 1;
    for (size_t a = 0; a + 2 < r; ++a) heads *= q[a];
    return {heads, t, k[r - 2], d};
  }
};

struct LayerNormParams {
  float eps = 1e-5f;
  static LayerNormParams read(const Attrs& a) { return {static_cast<float>(a.get_float("eps", 1e-5))}; }
};

struct DropoutParams {
  static constexpr double kDefaultRate = 0.1;
  double rate = kDefaultRate;
  int64_t seed = 0;
  static DropoutParams read(const Attrs& a) { return {a.get_float("rate", kDefaultRate), a.get_int("seed", 0)}; }
};

// The mixture of experts' routing (kernels/ops/moe.cc).
struct MoeParams {
  int k = 1;
  int64_t capacity = 1;
  bool normalize = false;
  static MoeParams read(const Attrs& a) {
    const int k = static_cast<int>(a.get_int("k", 1));
    return {k, a.get_int("capacity", 1), a.get_int("normalize", k == 2 ? 1 : 0) != 0};
  }
};

struct MseParams {
  bool mean = false;  // reduction "mean": divided by the logical element count
  static MseParams read(const Attrs& a) { return {a.get_string("reduction", "sum") == "mean"}; }
};

struct ClipFactorParams {
  double max_norm = 1.0;
  static ClipFactorParams read(const Attrs& a) { return {a.get_float("max_norm", 1.0)}; }
};

// embedding, embedding_grad, embedding_mask: a block of a larger table.
struct EmbeddingParams {
  int64_t total_rows = 0, row_offset = 0;  // 0, 0: the whole table
  int64_t rows = 0;                        // embedding_grad, embedding_mask: the block's (table's) rows
  static EmbeddingParams read(const Attrs& a) {
    return {a.get_int("total_rows", 0), a.get_int("row_offset", 0), a.get_int("rows", 0)};
  }
  // The rows ids may name: the whole table's (a block's total_rows).
  int64_t total_for(int64_t table_rows) const { return total_rows > 0 ? total_rows : table_rows; }
};

struct TransposeParams {
  std::vector<int64_t> perm;
  static TransposeParams read(const Attrs& a) { return {ints_or_one(a, "perm")}; }
};

// slice and slice_grad: where the box starts.
struct SliceParams {
  std::vector<int64_t> starts;
  static SliceParams read(const Attrs& a) { return {ints_or_one(a, "starts")}; }
};

struct ConcatParams {
  int64_t axis = 0;
  static ConcatParams read(const Attrs& a) { return {a.get_int("axis", 0)}; }
};

struct ZigzagParams {
  int64_t axis = 1, parts = 1;
  bool inverse = false;
  static ZigzagParams read(const Attrs& a) {
    return {a.get_int("axis", 1), a.get_int("parts", 1), a.get_int("inverse", 0) != 0};
  }
};

// sgd_update, momentum_update, adam_update.
struct UpdateParams {
  LrSchedule lr;
  double weight_decay = 0.0;
  double momentum = 0.9;                          // momentum_update
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam_update
  bool decoupled = false;                         // AdamW
  template <double kDefaultLr>
  static UpdateParams read_with(const Attrs& a) {
    return {lr_schedule(a, kDefaultLr), a.get_float("weight_decay", 0.0), a.get_float("momentum", 0.9),
            a.get_float("beta1", 0.9),  a.get_float("beta2", 0.999),     a.get_float("epsilon", 1e-8),
            a.get_int("decoupled", 0) != 0};
  }
};
struct SgdParams : UpdateParams {
  static SgdParams read(const Attrs& a) { return {read_with<0.01>(a)}; }
};
struct AdamParams : UpdateParams {
  static AdamParams read(const Attrs& a) { return {read_with<0.001>(a)}; }
};

}  // namespace rill
