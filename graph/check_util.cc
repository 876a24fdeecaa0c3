#include "graph/check_util.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace rill::graph::check {
namespace {

// Edit distance counting a swap of neighbours as one edit (optimal string
// alignment), or a large value for words too long to be typos worth fixing.
size_t edit_distance(std::string_view a, std::string_view b) {
  constexpr size_t kLongest = 64;
  if (a.size() > kLongest || b.size() > kLongest) return SIZE_MAX;
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string label(std::string_view section, size_t index, std::string_view name) {
  if (name.empty()) return fmt::format("{}[{}]", section, index);
  return fmt::format("{}[{}] ({})", section, index, name);
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty()) return "";
  // Another case of a known name ('ReLU' for 'relu') is the likeliest slip.
  auto lower = [](std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  for (const std::string& candidate : candidates)
    if (candidate != word && lower(candidate) == lower(word)) return fmt::format(" (did you mean '{}'?)", candidate);
  size_t best = SIZE_MAX;
  const std::string* pick = nullptr;
  for (const std::string& candidate : candidates) {
    size_t d = edit_distance(word, candidate);
    if (d < best) {
      best = d;
      pick = &candidate;
    }
  }
  if (pick == nullptr || best == 0) return "";
  // Up to a third of the letters may differ, at least one, but never all of
  // a short word ('z' is not a typo of 'x').
  size_t shorter = std::min(word.size(), pick->size());
  if (best > std::max<size_t>(1, shorter / 3) || best >= shorter) return "";
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
  return checked_bytes(shape, DType::kF32) >= 0;
}

std::vector<FieldInfo> dataset_fields(const Dataset& dataset) {
  const FieldInfo label{"label", DType::kI32, Shape{}};
  if (dataset.kind == "idx") return {{"image", DType::kF32, std::nullopt}, label};
  if (dataset.kind == "csv") {
    std::vector<FieldInfo> fields{{"features", DType::kF32, std::nullopt}};
    if (dataset.label_column >= 0) fields.push_back(label);
    return fields;
  }
  if (dataset.kind == "synthetic") {
    std::vector<FieldInfo> fields{{"features", DType::kF32, dataset.feature_shape}, label};
    if (dataset.id_fields > 0) fields.push_back({"ids", DType::kI32, Shape{dataset.id_fields}});
    return fields;
  }
  if (dataset.kind == "text" || dataset.kind == "tokens") {
    const Shape window{dataset.context};
    return {{"tokens", DType::kI32, window}, {"targets", DType::kI32, window}};
  }
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
