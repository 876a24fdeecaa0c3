// Layout ops that move no values between elements' logical positions beyond a
// permutation: reshape, transpose, identity. All are linear, so partial sums
// pass through; their gradients are the inverse layout change.
#include <cstring>

#include "kernels/ops/attr_read.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

// --- reshape -----------------------------------------------------------------

// The target shape with a 0 taken from the input's axis at its place (keep
// the batch and the sequence: [0, 0, H, -1] splits heads without spelling
// out T) and a -1 resolved against the input's element count.
StatusOr<Shape> reshape_target(const Attrs& attrs, const Shape& input) {
  RILL_ASSIGN_OR_RETURN(const std::vector<int64_t> written, read_ints(attrs, "shape", true));
  std::vector<int64_t> shape = written;
  int inferred = -1;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) {
      if (d >= input.size())
        return invalid_argument("attr 'shape' = {}: a 0 keeps the input's axis {}, but input shape {} has rank {}",
                                shape_string(written), d, shape_string(input), input.size());
      shape[d] = input[d];
    }
    if (shape[d] == -1) {
      if (inferred >= 0) return invalid_argument("attr 'shape' = {} has more than one -1", shape_string(written));
      inferred = static_cast<int>(d);
    } else if (shape[d] <= 0) {
      return invalid_argument("attr 'shape' = {}: dims must be positive, 0 (the input's) or a single -1",
                              shape_string(written));
    } else if (__builtin_mul_overflow(known, shape[d], &known)) {
      return invalid_argument("attr 'shape' = {} holds more elements than fit in 64 bits", shape_string(written));
    }
  }
  int64_t count = num_elements(input);
  if (inferred >= 0) {
    if (count % known != 0)
      return invalid_argument("attr 'shape' = {} cannot hold the {} elements of input shape {}", shape_string(written),
                              count, shape_string(input));
    shape[inferred] = count / known;
  } else if (known != count) {
    return invalid_argument("attr 'shape' = {} has {} elements but input shape {} has {}", shape_string(written), known,
                            shape_string(input), count);
  }
  return shape;
}

Status reshape_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  RILL_ASSIGN_OR_RETURN(Shape shape, reshape_target(attrs, inputs[0].shape));
  outputs->push_back({std::move(shape), inputs[0].dtype});
  return {};
}

// Whether `whole` is `head` times a product of axes of `rest` from its
// start: [C] and [H, D] with C = H D, or [T] and [T].
bool starts_with_factor(int64_t whole, int64_t head, const Shape& rest, size_t from) {
  int64_t product = head;
  for (size_t k = from; product < whole && k < rest.size(); ++k) product *= rest[k];
  return product == whole;
}

// Row-major order keeps what comes before an axis together: input axis i
// and output axis j hold the same elements in the same order when the axes
// before them hold as many elements, and one of the two is the other times
// the axes that follow it ([B, T, C] axis 2 and [B, T, H, D] axis 2: C = H D,
// heads split as the channels are). A split of one is then the split of
// the other, as long as each device's piece is whole (a device count that
// divides H): SBP deduction checks that once the count is known
// (OpDef::copies_bytes).
std::vector<SbpSignature> reshape_sbp(const Attrs& attrs, std::span<const TensorMeta> inputs) {
  std::vector<SbpSignature> sigs = {{{Sbp::broadcast()}, {Sbp::broadcast()}},
                                    {{Sbp::partial_sum()}, {Sbp::partial_sum()}}};
  auto target = reshape_target(attrs, inputs[0].shape);
  if (!target.ok()) return sigs;
  const Shape& in = inputs[0].shape;
  const Shape& out = *target;
  int64_t before_in = 1;
  for (size_t i = 0; i < in.size(); before_in *= in[i], ++i) {
    int64_t before_out = 1;
    for (size_t j = 0; j < out.size() && before_out <= before_in; before_out *= out[j], ++j) {
      if (before_out != before_in || (out[j] == 1 && in[i] != 1)) continue;  // not a size-1 axis beside it
      if (starts_with_factor(in[i], out[j], out, j + 1) || starts_with_factor(out[j], in[i], in, i + 1))
        sigs.push_back({{Sbp::split(static_cast<int>(i))}, {Sbp::split(static_cast<int>(j))}});
      break;
    }
  }
  return sigs;
}

Status copy_kernel(KernelContext& ctx) {
  const TensorView& in = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  if (in.bytes() != out.bytes())
    return internal_error("copy of {} into {}: sizes differ", shape_string(in.shape), shape_string(out.shape));
  if (in.data != out.data) std::memcpy(out.data, in.data, in.bytes());
  return {};
}

Status reshape_grad(GradBuilder& b) {
  std::string dy = b.output_grad(0);
  if (dy.empty() || !b.needs_input_grad(0)) return {};
  const Shape& shape = b.meta(b.input(0)).shape;
  b.set_input_grad(0, b.add_op("reshape", {dy}, {{"shape", std::vector<int64_t>(shape)}})[0]);
  return {};
}

// --- transpose ---------------------------------------------------------------

StatusOr<std::vector<int64_t>> read_perm(const Attrs& attrs, const Shape& input) {
  RILL_ASSIGN_OR_RETURN(std::vector<int64_t> perm, read_ints(attrs, "perm", true));
  if (perm.size() != input.size())
    return invalid_argument("attr 'perm' = {} has {} entries but input shape {} has rank {}", shape_string(perm),
                            perm.size(), shape_string(input), input.size());
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p])
      return invalid_argument("attr 'perm' = {} is not a permutation of the axes of shape {}", shape_string(perm),
                              shape_string(input));
    seen[p] = true;
  }
  return perm;
}

Status transpose_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  const Shape& in = inputs[0].shape;
  RILL_RETURN_IF_ERROR(check_rank_limit(in, "transpose input"));
  RILL_ASSIGN_OR_RETURN(std::vector<int64_t> perm, read_perm(attrs, in));
  Shape out(in.size());
  for (size_t j = 0; j < perm.size(); ++j) out[j] = in[perm[j]];
  outputs->push_back({std::move(out), inputs[0].dtype});
  return {};
}

std::vector<SbpSignature> transpose_sbp(const Attrs& attrs, std::span<const TensorMeta> inputs) {
  std::vector<SbpSignature> sigs = {{{Sbp::broadcast()}, {Sbp::broadcast()}},
                                    {{Sbp::partial_sum()}, {Sbp::partial_sum()}}};
  auto perm = read_perm(attrs, inputs[0].shape);
  if (!perm.ok()) return sigs;
  // Input axis perm[j] becomes output axis j.
  for (size_t j = 0; j < perm->size(); ++j)
    sigs.push_back({{Sbp::split(static_cast<int>((*perm)[j]))}, {Sbp::split(static_cast<int>(j))}});
  return sigs;
}

Status transpose_kernel(KernelContext& ctx) {
  const TensorView& in = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  const std::vector<int64_t>* perm_attr = &params_of<TransposeParams>(ctx).perm;
  int rank = static_cast<int>(out.shape.size());
  if (perm_attr == nullptr || static_cast<int>(perm_attr->size()) != rank || in.shape.size() != out.shape.size() ||
      rank > kMaxKernelRank)
    return internal_error("transpose of {} into {}: attr 'perm' does not match", shape_string(in.shape),
                          shape_string(out.shape));
  const std::vector<int64_t>& perm = *perm_attr;
  auto in_strides = row_major_strides(in.shape);
  // Stride in the input of one step along each output axis.
  std::array<int64_t, kMaxKernelRank> step{};
  for (int j = 0; j < rank; ++j) step[j] = in_strides[perm[j]];
  // Trailing axes the permutation leaves in place are one run contiguous in
  // both tensors (a [B, T, H, D] -> [B, H, T, D] moves runs of D): copied
  // whole, the odometer walks the axes before them.
  int outer = rank;
  int64_t run = 1;
  while (outer > 0 && perm[outer - 1] == outer - 1) run *= out.shape[--outer];
  // Elements as unsigned words of their size: the values are moved, never read.
  auto move = [&]<typename W>(std::type_identity<W>) {
    const W* src = static_cast<const W*>(in.data);
    W* dst = static_cast<W*>(out.data);
    std::array<int64_t, kMaxKernelRank> index{};
    int64_t offset = 0;
    const int64_t count = run == 0 ? 0 : out.size() / run;
    for (int64_t i = 0; i < count; ++i) {
      if (run == 1)
        dst[i] = src[offset];
      else
        std::memcpy(dst + i * run, src + offset, static_cast<size_t>(run) * sizeof(W));
      for (int j = outer - 1; j >= 0; --j) {  // odometer over the output index
        offset += step[j];
        if (++index[j] < out.shape[j]) break;
        offset -= step[j] * out.shape[j];
        index[j] = 0;
      }
    }
  };
  if (dtype_size(out.dtype) == 2)
    move(std::type_identity<uint16_t>{});
  else
    move(std::type_identity<uint32_t>{});
  return {};
}

Status transpose_grad(GradBuilder& b) {
  std::string dy = b.output_grad(0);
  if (dy.empty() || !b.needs_input_grad(0)) return {};
  std::vector<int64_t> perm = b.attrs().get_ints("perm");
  std::vector<int64_t> inverse(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) inverse[perm[j]] = static_cast<int64_t>(j);
  b.set_input_grad(0, b.add_op("transpose", {dy}, {{"perm", inverse}})[0]);
  return {};
}

// --- identity ----------------------------------------------------------------

Status identity_infer(const Attrs&, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  outputs->push_back(inputs[0]);
  return {};
}

std::vector<SbpSignature> identity_sbp(const Attrs&, std::span<const TensorMeta> inputs) {
  std::vector<SbpSignature> sigs = {{{Sbp::broadcast()}, {Sbp::broadcast()}},
                                    {{Sbp::partial_sum()}, {Sbp::partial_sum()}}};
  for (size_t a = 0; a < inputs[0].shape.size(); ++a) {
    Sbp s = Sbp::split(static_cast<int>(a));
    sigs.push_back({{s}, {s}});
  }
  return sigs;
}

// --- depend: input 0, once input 1 is there ----------------------------------

// Input 0 as it is split (or partial), input 1 any way at all: it only
// orders the copy after it.
std::vector<SbpSignature> depend_sbp(const Attrs&, std::span<const TensorMeta> inputs) {
  auto kinds = [](const TensorMeta& t) {
    std::vector<Sbp> out = {Sbp::broadcast(), Sbp::partial_sum()};
    for (size_t a = 0; a < t.shape.size(); ++a) out.push_back(Sbp::split(static_cast<int>(a)));
    return out;
  };
  std::vector<SbpSignature> sigs;
  for (const Sbp& x : kinds(inputs[0]))
    for (const Sbp& after : kinds(inputs[1])) sigs.push_back({{x, after}, {x}});
  return sigs;
}

Status identity_grad(GradBuilder& b) {
  std::string dy = b.output_grad(0);
  if (!dy.empty() && b.needs_input_grad(0)) b.set_input_grad(0, dy);
  return {};
}

}  // namespace

const OpDef kReshapeOp = {
    .type = "reshape", .infer = reshape_infer, .sbp = reshape_sbp, .grad = reshape_grad,
    .cpu = copy_kernel, .cuda = "copy",
    .copies_bytes = true};
const OpDef kTransposeOp = {.type = "transpose",
                            .infer = transpose_infer,
                            .sbp = transpose_sbp,
                            .grad = transpose_grad,
                            .cpu = transpose_kernel, .cuda = "transpose", .parse = parse_as<TransposeParams>};
const OpDef kIdentityOp = {
    .type = "identity", .infer = identity_infer, .sbp = identity_sbp, .grad = identity_grad,
    .cpu = copy_kernel, .cuda = "copy"};
// A copy of input 0 made once input 1 is ready: activation recompute
// (compiler/autograd.cc) starts a group's forward again from its inputs
// only when the gradient of its output has come. No gradient: it is made in
// the backward.
const OpDef kDependOp = {.type = "depend", .num_inputs = 2, .infer = identity_infer, .sbp = depend_sbp,
                         .cpu = copy_kernel, .cuda = "copy"};

}  // namespace rill
