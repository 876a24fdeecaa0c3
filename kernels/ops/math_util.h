// Helpers shared by the math ops of this folder (matmul, elementwise,
// activations, losses, reductions): attribute type checks, axis lists and SBP
// signature building. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/attrs.h"
#include "kernels/op.h"
#include "kernels/tensor.h"

namespace rill::math {

// Each check passes when the attr is absent (the op's default applies) and
// fails with invalid_argument naming the attr when it has the wrong type.
Status check_int_attr(const Attrs& attrs, const char* name);
Status check_bool_attr(const Attrs& attrs, const char* name);  // an int, 0 or 1
Status check_float_attr(const Attrs& attrs, const char* name);  // a float or an int
Status check_string_attr(const Attrs& attrs, const char* name);
Status check_ints_attr(const Attrs& attrs, const char* name);  // a list of ints, or one int

// The sorted, distinct, non-negative axes of `axes` over `rank` dimensions
// (negative counts from the end; empty means every axis), or an error.
StatusOr<std::vector<int>> normalize_axes(const std::vector<int64_t>& axes, int rank);
// `shape` with `axes` (sorted) removed, or set to 1 when keepdims.
Shape reduced_shape(const Shape& shape, const std::vector<int>& axes, bool keepdims);
// Product of shape[axis] over `axes`.
int64_t count_over(const Shape& shape, const std::vector<int>& axes);

// A signature whose every input and output has the same SBP.
SbpSignature uniform_signature(Sbp sbp, int num_inputs, int num_outputs = 1);
// uniform_signature(S(i)) for each axis i of `rank` except `skip_axis`, then B.
std::vector<SbpSignature> split_or_broadcast(int rank, int num_inputs, int skip_axis = -1);

// bias_add's layout: b covers x's axes [axis, axis + rank(b)), axis the int
// attr `axis` or, absent, the last rank(b) axes. x is [outer, channels,
// inner] with channels b's elements. For the CPU and CUDA kernels alike.
int64_t bias_axis(const Attrs& attrs, const Shape& x, const Shape& b);
struct BiasLayout {
  int64_t outer = 1, channels = 1, inner = 1;
};
BiasLayout bias_layout(int64_t axis, const Shape& x, const Shape& b);

// True for a shape that holds one element and has rank 0 or 1: [] or [1].
bool is_scalar_shape(const Shape& shape);

// Checks that logits [..., C] and labels [...] (i32) fit together.
Status check_logits_labels(const TensorMeta& logits, const TensorMeta& labels);
// Kernel-side check of class labels: each must be in [0, num_classes). The
// error names the first bad label and its position (bad data must not crash).
Status check_labels(const char* op, const int32_t* labels, int64_t n, int64_t num_classes);
// OpDef::index_bound of ops reading logits [..., C] (input 0) and labels
// (input 1): labels lie in [0, C).
int64_t labels_bound(const Attrs& attrs, std::span<const TensorMeta> logical_inputs, int input);

// Gradient-rule helper: adds ops that sum `grad` over every axis into a
// tensor shaped like `like`, a scalar ([] or [1]); returns its name. For a
// scalar operand broadcast over the other one (add, sub, mul).
std::string sum_to_scalar_like(GradBuilder& builder, const std::string& grad, const std::string& like);

}  // namespace rill::math
