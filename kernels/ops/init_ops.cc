// Initializer ops (fill, uniform, normal, xavier_uniform, kaiming_uniform):
// no inputs, one output, run once to give a variable its first value.
//
// Random values are a pure function of (seed, logical element index): a
// counter-based generator (the splitmix64 finaliser applied to a Weyl sequence
// position) rather than a stateful engine. A device holding one piece of a
// split variable therefore produces exactly that piece of the tensor a single
// device would have made, and no device needs to generate what it discards.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "kernels/ops/attr_read.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

constexpr uint64_t kWeylStep = 0x9E3779B97F4A7C15ull;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 64 random bits for position `counter` of the stream of `key`.
uint64_t random_bits(uint64_t key, uint64_t counter) { return mix64(key + (counter + 1) * kWeylStep); }

uint64_t stream_key(const Attrs& attrs) { return mix64(static_cast<uint64_t>(attrs.get_int("seed", 0)) + kWeylStep); }

// Uniform in [0, 1) with 53 random bits.
double unit_uniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// low + (high - low) * u, kept below `high` after rounding to float.
float uniform_value(uint64_t key, int64_t index, double low, double high) {
  float value = static_cast<float>(low + (high - low) * unit_uniform(random_bits(key, index)));
  if (high > low && value >= static_cast<float>(high))
    value = std::nextafter(static_cast<float>(high), static_cast<float>(low));
  return value;
}

// One standard normal per element by Box-Muller, from the element's two draws.
float normal_value(uint64_t key, int64_t index, double mean, double stddev) {
  uint64_t counter = static_cast<uint64_t>(index) * 2;
  double u1 = 1.0 - unit_uniform(random_bits(key, counter));  // (0, 1]: log is finite
  double u2 = unit_uniform(random_bits(key, counter + 1));
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return static_cast<float>(mean + stddev * z);
}

// Calls write(position in the piece, logical row-major index) for every element
// of this device's piece of output 0. Without logical_output (a whole tensor
// on one device) the piece is the whole tensor.
template <typename Write>
Status for_each_element(KernelContext& ctx, Write write) {
  const TensorView& out = ctx.outputs[0];
  const Shape& logical = ctx.logical_output.empty() ? out.shape : ctx.logical_output;
  int rank = static_cast<int>(out.shape.size());
  bool has_offset = !ctx.output_offset.empty();
  if (static_cast<int>(logical.size()) != rank || rank > kMaxKernelRank ||
      (has_offset && static_cast<int>(ctx.output_offset.size()) != rank))
    return internal_error("initializer piece {} of logical {}: ranks differ", shape_string(out.shape),
                          shape_string(logical));
  std::array<int64_t, kMaxKernelRank> strides = row_major_strides(logical);
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) {
    int64_t offset = has_offset ? ctx.output_offset[d] : 0;
    if (offset < 0 || offset + out.shape[d] > logical[d])
      return internal_error("initializer piece {} at offset {} overruns logical {}", shape_string(out.shape),
                            shape_string(ctx.output_offset), shape_string(logical));
    base += offset * strides[d];
  }
  int64_t count = out.size();
  if (count == 0) return {};
  int64_t row = rank == 0 ? 1 : out.shape[rank - 1];
  std::array<int64_t, kMaxKernelRank> index{};
  for (int64_t position = 0; position < count; position += row) {
    for (int64_t j = 0; j < row; ++j) write(position + j, base + j);
    for (int d = rank - 2; d >= 0; --d) {  // odometer over all but the last axis
      base += strides[d];
      if (++index[d] < out.shape[d]) break;
      base -= strides[d] * out.shape[d];
      index[d] = 0;
    }
  }
  return {};
}

// (fan_in, fan_out) of a 1-D or 2-D logical shape: a [in, out] weight matrix,
// or a bias vector counting its length for both.
std::pair<double, double> fans(const Shape& shape) {
  if (shape.size() == 1) return {static_cast<double>(shape[0]), static_cast<double>(shape[0])};
  return {static_cast<double>(shape[0]), static_cast<double>(shape[1])};
}

// Checks the attrs every initializer shares and infers the output.
Status init_infer_common(const Attrs& attrs, bool random_only_f32, std::vector<TensorMeta>* outputs) {
  RILL_ASSIGN_OR_RETURN(Shape shape, read_ints(attrs, "shape", true));
  for (int64_t dim : shape)
    if (dim <= 0) return invalid_argument("attr 'shape' = {}: dims must be positive", shape_string(shape));
  RILL_RETURN_IF_ERROR(check_rank_limit(shape, "attr 'shape'"));
  DType dtype = DType::kF32;
  if (attrs.has("dtype")) {
    const auto* text_attr = std::get_if<std::string>(&attrs.values().at("dtype"));
    if (text_attr == nullptr) return invalid_argument("attr 'dtype' must be a string (f32, i32, bf16 or f16)");
    const std::string& text = *text_attr;
    if (!parse_dtype(text, &dtype)) return invalid_argument("attr 'dtype' = '{}' is not a dtype (f32, i32, bf16 or f16)", text);
  }
  if (random_only_f32 && dtype != DType::kF32)
    return invalid_argument("attr 'dtype' = '{}': random initializers make f32 only", dtype_name(dtype));
  RILL_ASSIGN_OR_RETURN(int64_t seed, read_int(attrs, "seed", 0));
  (void)seed;
  outputs->push_back({std::move(shape), dtype});
  return {};
}

std::vector<SbpSignature> init_sbp(const Attrs&, std::span<const TensorMeta>) { return {{{}, {Sbp::broadcast()}}}; }

// --- fill --------------------------------------------------------------------

Status fill_infer(const Attrs& attrs, std::span<const TensorMeta>, std::vector<TensorMeta>* outputs) {
  RILL_ASSIGN_OR_RETURN(double value, read_float(attrs, "value", 0.0));
  (void)value;
  return init_infer_common(attrs, false, outputs);
}

Status fill_kernel(KernelContext& ctx) {
  const TensorView& out = ctx.outputs[0];
  double value = ctx.attrs->get_float("value", 0.0);
  visit_dtype(out.dtype, [&]<typename T>(std::type_identity<T>) {
    std::fill_n(static_cast<T*>(out.data), out.size(), element_from<T>(value));
  });
  return {};
}

// --- uniform / normal ----------------------------------------------------------

Status uniform_infer(const Attrs& attrs, std::span<const TensorMeta>, std::vector<TensorMeta>* outputs) {
  RILL_ASSIGN_OR_RETURN(double low, read_float(attrs, "low", 0.0));
  RILL_ASSIGN_OR_RETURN(double high, read_float(attrs, "high", 1.0));
  if (!(low <= high)) return invalid_argument("attrs 'low' = {} and 'high' = {}: need low <= high", low, high);
  return init_infer_common(attrs, true, outputs);
}

Status uniform_kernel(KernelContext& ctx) {
  double low = ctx.attrs->get_float("low", 0.0), high = ctx.attrs->get_float("high", 1.0);
  uint64_t key = stream_key(*ctx.attrs);
  float* out = ctx.outputs[0].f32();
  return for_each_element(ctx, [&](int64_t at, int64_t index) { out[at] = uniform_value(key, index, low, high); });
}

Status normal_infer(const Attrs& attrs, std::span<const TensorMeta>, std::vector<TensorMeta>* outputs) {
  RILL_ASSIGN_OR_RETURN(double mean, read_float(attrs, "mean", 0.0));
  RILL_ASSIGN_OR_RETURN(double stddev, read_float(attrs, "std", 1.0));
  if (!(stddev >= 0) || !std::isfinite(mean))
    return invalid_argument("attrs 'mean' = {} and 'std' = {}: need a finite mean and std >= 0", mean, stddev);
  return init_infer_common(attrs, true, outputs);
}

Status normal_kernel(KernelContext& ctx) {
  double mean = ctx.attrs->get_float("mean", 0.0), stddev = ctx.attrs->get_float("std", 1.0);
  uint64_t key = stream_key(*ctx.attrs);
  float* out = ctx.outputs[0].f32();
  return for_each_element(ctx, [&](int64_t at, int64_t index) { out[at] = normal_value(key, index, mean, stddev); });
}

// --- xavier_uniform / kaiming_uniform -------------------------------------------

Status fan_init_infer(const Attrs& attrs, std::span<const TensorMeta>, std::vector<TensorMeta>* outputs) {
  RILL_RETURN_IF_ERROR(init_infer_common(attrs, true, outputs));
  const Shape& shape = outputs->back().shape;
  if (shape.size() != 1 && shape.size() != 2)
    return invalid_argument("attr 'shape' = {}: fan-based initializers need a 1-D or 2-D shape", shape_string(shape));
  return {};
}

// Bounds come from the logical shape: a piece must not see its own fans.
const Shape& logical_shape(const KernelContext& ctx) {
  return ctx.logical_output.empty() ? ctx.outputs[0].shape : ctx.logical_output;
}

Status fan_uniform_kernel(KernelContext& ctx, double bound) {
  uint64_t key = stream_key(*ctx.attrs);
  float* out = ctx.outputs[0].f32();
  return for_each_element(ctx, [&](int64_t at, int64_t index) { out[at] = uniform_value(key, index, -bound, bound); });
}

Status xavier_kernel(KernelContext& ctx) {
  auto [fan_in, fan_out] = fans(logical_shape(ctx));
  return fan_uniform_kernel(ctx, std::sqrt(6.0 / (fan_in + fan_out)));
}

Status kaiming_kernel(KernelContext& ctx) {
  double fan_in = fans(logical_shape(ctx)).first;
  return fan_uniform_kernel(ctx, std::sqrt(6.0 / fan_in));
}

}  // namespace

const OpDef kFillOp = {.type = "fill",
                       .num_inputs = 0,
                       .role = OpRole::kInitializer,
                       .infer = fill_infer,
                       .sbp = init_sbp,
                       .cpu = fill_kernel};
const OpDef kUniformOp = {.type = "uniform",
                          .num_inputs = 0,
                          .role = OpRole::kInitializer,
                          .infer = uniform_infer,
                          .sbp = init_sbp,
                          .cpu = uniform_kernel};
const OpDef kNormalOp = {.type = "normal",
                         .num_inputs = 0,
                         .role = OpRole::kInitializer,
                         .infer = normal_infer,
                         .sbp = init_sbp,
                         .cpu = normal_kernel};
const OpDef kXavierUniformOp = {.type = "xavier_uniform",
                                .num_inputs = 0,
                                .role = OpRole::kInitializer,
                                .infer = fan_init_infer,
                                .sbp = init_sbp,
                                .cpu = xavier_kernel};
const OpDef kKaimingUniformOp = {.type = "kaiming_uniform",
                                 .num_inputs = 0,
                                 .role = OpRole::kInitializer,
                                 .infer = fan_init_infer,
                                 .sbp = init_sbp,
                                 .cpu = kaiming_kernel};

}  // namespace rill
