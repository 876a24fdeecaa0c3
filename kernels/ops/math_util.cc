#include "kernels/ops/math_util.h"

#include <algorithm>
#include <variant>

namespace rill::math {
namespace {

const AttrValue* find_attr(const Attrs& attrs, const char* name) {
  auto it = attrs.values().find(name);
  return it == attrs.values().end() ? nullptr : &it->second;
}

}  // namespace

Status check_int_attr(const Attrs& attrs, const char* name) {
  const AttrValue* v = find_attr(attrs, name);
  if (v != nullptr && !std::holds_alternative<int64_t>(*v))
    return invalid_argument("attr '{}' must be an int", name);
  return {};
}

Status check_bool_attr(const Attrs& attrs, const char* name) {
  RILL_RETURN_IF_ERROR(check_int_attr(attrs, name));
  int64_t value = attrs.get_int(name, 0);
  if (value != 0 && value != 1) return invalid_argument("attr '{}' must be 0 or 1, got {}", name, value);
  return {};
}

Status check_float_attr(const Attrs& attrs, const char* name) {
  const AttrValue* v = find_attr(attrs, name);
  if (v != nullptr && !std::holds_alternative<double>(*v) && !std::holds_alternative<int64_t>(*v))
    return invalid_argument("attr '{}' must be a number", name);
  return {};
}

Status check_string_attr(const Attrs& attrs, const char* name) {
  const AttrValue* v = find_attr(attrs, name);
  if (v != nullptr && !std::holds_alternative<std::string>(*v))
    return invalid_argument("attr '{}' must be a string", name);
  return {};
}

Status check_ints_attr(const Attrs& attrs, const char* name) {
  const AttrValue* v = find_attr(attrs, name);
  if (v != nullptr && !std::holds_alternative<std::vector<int64_t>>(*v) && !std::holds_alternative<int64_t>(*v))
    return invalid_argument("attr '{}' must be a list of ints", name);
  return {};
}

StatusOr<std::vector<int>> normalize_axes(const std::vector<int64_t>& axes, int rank) {
  std::vector<int> out;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t axis : axes) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) return invalid_argument("axis {} is out of range for rank {}", axis, rank);
    out.push_back(static_cast<int>(a));
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    return invalid_argument("axes [{}] name an axis twice", fmt::join(axes, ", "));
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int>& axes, bool keepdims) {
  Shape out;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), i);
    if (!reduced) out.push_back(shape[i]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

int64_t count_over(const Shape& shape, const std::vector<int>& axes) {
  int64_t n = 1;
  for (int a : axes) n *= shape[a];
  return n;
}

SbpSignature uniform_signature(Sbp sbp, int num_inputs, int num_outputs) {
  return SbpSignature{std::vector<Sbp>(num_inputs, sbp), std::vector<Sbp>(num_outputs, sbp)};
}

std::vector<SbpSignature> split_or_broadcast(int rank, int num_inputs, int skip_axis) {
  std::vector<SbpSignature> out;
  for (int i = 0; i < rank; ++i)
    if (i != skip_axis) out.push_back(uniform_signature(Sbp::split(i), num_inputs));
  out.push_back(uniform_signature(Sbp::broadcast(), num_inputs));
  return out;
}

int64_t bias_axis(const Attrs& attrs, const Shape& x, const Shape& b) {
  return attrs.get_int("axis", static_cast<int64_t>(x.size()) - static_cast<int64_t>(b.size()));
}

BiasLayout bias_layout(int64_t axis, const Shape& x, const Shape& b) {
  BiasLayout layout;
  layout.channels = num_elements(b);
  for (int64_t i = 0; i < axis; ++i) layout.outer *= x[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + b.size(); i < x.size(); ++i) layout.inner *= x[i];
  return layout;
}

bool is_scalar_shape(const Shape& shape) { return shape.size() <= 1 && num_elements(shape) == 1; }

Status check_logits_labels(const TensorMeta& logits, const TensorMeta& labels) {
  if (logits.dtype != DType::kF32 || labels.dtype != DType::kI32)
    return invalid_argument("logits must be f32 and labels i32, got {} and {}", dtype_name(logits.dtype),
                            dtype_name(labels.dtype));
  const Shape& l = logits.shape;
  if (l.size() < 2 || labels.shape != Shape(l.begin(), l.end() - 1))
    return invalid_argument("logits {} must be [..., C] and labels {} the leading axes [...] (as [N, C] and [N])",
                            shape_string(l), shape_string(labels.shape));
  return {};
}

Status check_labels(const char* op, const int32_t* labels, int64_t n, int64_t num_classes) {
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= num_classes)
      return invalid_argument("{}: label {} at position {} is outside [0, {})", op, labels[i], i, num_classes);
  return {};
}

int64_t labels_bound(const Attrs&, std::span<const TensorMeta> in, int input) {
  return input == 1 && !in[0].shape.empty() ? in[0].shape.back() : 0;
}

std::string sum_to_scalar_like(GradBuilder& builder, const std::string& grad, const std::string& like) {
  Attrs all{{"axes", std::vector<int64_t>{}}, {"keepdims", int64_t{0}}};
  std::string sum = builder.add_op("reduce_sum", {grad}, all)[0];  // shape []
  if (builder.meta(like).shape.empty()) return sum;
  // [] -> [1]: broadcast_like restores the one axis the sum removed.
  return builder.add_op("broadcast_like", {sum, like}, {{"axes", std::vector<int64_t>{0}}})[0];
}

}  // namespace rill::math
