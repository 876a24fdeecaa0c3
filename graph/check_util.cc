#include "graph/check_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace rill::graph::check {
namespace {

// Edit distance, or a large value for words too long to be typos worth fixing.
size_t edit_distance(std::string_view a, std::string_view b) {
  constexpr size_t kLongest = 64;
  if (a.size() > kLongest || b.size() > kLongest) return SIZE_MAX;
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string label(std::string_view section, size_t index, std::string_view name) {
  if (name.empty()) return fmt::format("{}[{}]", section, index);
  return fmt::format("{}[{}] ({})", section, index, name);
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty()) return "";
  size_t best = SIZE_MAX;
  const std::string* pick = nullptr;
  for (const std::string& candidate : candidates) {
    size_t d = edit_distance(word, candidate);
    if (d < best) {
      best = d;
      pick = &candidate;
    }
  }
  size_t allowed = std::max<size_t>(1, std::min(word.size(), pick ? pick->size() : 0) / 3);
  if (pick == nullptr || best == 0 || best > allowed) return "";
  return fmt::format(" (did you mean '{}'?)", *pick);
}

std::string name_list(const std::vector<std::string>& names, size_t limit) {
  if (names.empty()) return "none";
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(limit, names.size()));
  std::string out = fmt::format("{}", fmt::join(shown, ", "));
  if (names.size() > limit) out += ", ...";
  return out;
}

bool sane_shape(const Shape& shape) {
  constexpr int64_t kLargestDim = int64_t{1} << 31;
  if (shape.size() > 8) return false;
  for (int64_t dim : shape)
    if (dim < 1 || dim >= kLargestDim) return false;
  return true;
}

std::vector<FieldInfo> dataset_fields(const Dataset& dataset) {
  const FieldInfo label{"label", DType::kI32, Shape{}};
  if (dataset.kind == "idx") return {{"image", DType::kF32, std::nullopt}, label};
  if (dataset.kind == "csv") {
    std::vector<FieldInfo> fields{{"features", DType::kF32, std::nullopt}};
    if (dataset.label_column >= 0) fields.push_back(label);
    return fields;
  }
  if (dataset.kind == "synthetic") return {{"features", DType::kF32, dataset.feature_shape}, label};
  if (dataset.kind == "inline") {
    std::vector<FieldInfo> fields;
    for (const InlineTensor& t : dataset.tensors) {
      std::optional<Shape> shape;
      if (!t.shape.empty()) shape = Shape(t.shape.begin() + 1, t.shape.end());
      fields.push_back({t.name, t.dtype, shape});
    }
    return fields;
  }
  return {};
}

int64_t known_num_samples(const Dataset& dataset) {
  if (dataset.kind == "synthetic") return dataset.num_samples;
  if (dataset.kind == "inline" && !dataset.tensors.empty() && !dataset.tensors[0].shape.empty())
    return dataset.tensors[0].shape[0];
  return -1;
}

const Dataset* find_dataset(const Job& job, std::string_view name) {
  for (const Dataset& d : job.datasets)
    if (d.name == name) return &d;
  return nullptr;
}

std::vector<std::string> dataset_names(const Job& job) {
  std::vector<std::string> names;
  for (const Dataset& d : job.datasets) names.push_back(d.name);
  return names;
}

}  // namespace rill::graph::check
