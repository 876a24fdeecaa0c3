// Reader for numeric CSV: one sample per line, comma-separated numbers, an
// optional header line, an optional integer label column. Blank lines are
// skipped. Lines and columns in messages count from 1, as editors show them.
#include <charconv>
#include <cmath>
#include <string_view>

#include "base/printable.h"
#include "kernels/data/csv_cells.h"
#include "kernels/data/dataset_readers.h"
#include "kernels/data/file_bytes.h"

namespace rill {
namespace {

using csv::split_cells;
using csv::trim;

// Parses one whole cell as a finite number; false if anything is left over.
bool parse_number(std::string_view cell, double* out) {
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);
  if (cell.empty()) return false;
  auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), *out);
  return ec == std::errc() && end == cell.data() + cell.size() && std::isfinite(*out);
}

}  // namespace

StatusOr<std::shared_ptr<const Dataset>> read_csv_dataset(const DatasetSpec& spec, const FileAccess& access) {
  if (spec.path.empty()) return invalid_argument("csv dataset '{}': no path given", spec.name);
  if (spec.label_column < -1) {
    return invalid_argument("csv dataset '{}': label_column {} is invalid (use -1 for no label)", spec.name,
                            spec.label_column);
  }
  auto read = read_file_bytes(spec.path, ReadOptions{.pipes = true, .access = &access});
  if (!read.ok()) return read.status().with_context(fmt::format("dataset '{}' (path)", spec.name));
  std::vector<uint8_t> bytes = std::move(*read);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::string& path = spec.path;

  std::vector<std::string_view> cells;
  std::vector<float> features;
  std::vector<int32_t> labels;
  size_t columns = 0;  // fixed by the first non-blank line (header included)
  bool header_pending = spec.header;
  int64_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t newline = text.find('\n', pos);
    if (newline == std::string_view::npos) newline = text.size();
    std::string_view line = text.substr(pos, newline - pos);
    pos = newline + 1;
    ++line_number;
    if (trim(line).empty()) continue;
    split_cells(line, &cells);
    if (columns == 0) {
      columns = cells.size();
      if (spec.label_column >= static_cast<int>(columns)) {
        return invalid_argument("csv file '{}': line {}: label_column {} is out of range: the file has {} columns",
                                path, line_number, spec.label_column, columns);
      }
      if (spec.label_column >= 0 && columns == 1) {
        return invalid_argument("csv file '{}': the only column is the label; no feature columns", path);
      }
    } else if (cells.size() != columns) {
      return invalid_argument("csv file '{}': line {}: expected {} columns, found {}", path, line_number, columns,
                              cells.size());
    }
    if (header_pending) {
      header_pending = false;
      continue;
    }
    for (size_t c = 0; c < cells.size(); ++c) {
      double value = 0;
      if (!parse_number(cells[c], &value)) {
        // The first row in words is a header the dataset did not declare.
        const bool header_like = features.empty() && labels.empty() && !spec.header;
        return invalid_argument("csv file '{}' (dataset '{}'): line {}, column {}: cannot parse {} as a finite "
                                "number{}",
                                path, spec.name, line_number, c + 1, excerpt(cells[c]),
                                header_like ? " (is line 1 a header? set \"header\": true on the dataset)" : "");
      }
      if (static_cast<int>(c) != spec.label_column) {
        features.push_back(static_cast<float>(value) * spec.scale);
        continue;
      }
      if (value != std::floor(value) || value < INT32_MIN || value > INT32_MAX) {
        return invalid_argument("csv file '{}': line {}, column {}: label {} is not a 32-bit integer", path,
                                line_number, c + 1, excerpt(cells[c]));
      }
      labels.push_back(static_cast<int32_t>(value));
    }
  }
  if (columns == 0) return invalid_argument("csv file '{}': empty dataset: the file has no lines", path);
  const size_t feature_columns = columns - (spec.label_column >= 0 ? 1 : 0);  // >= 1, checked above
  const int64_t n = static_cast<int64_t>(features.size() / feature_columns);
  if (n == 0) return invalid_argument("csv file '{}': empty dataset: no data rows", path);

  std::vector<DatasetField> fields;
  fields.push_back({"features", TensorMeta{{static_cast<int64_t>(feature_columns)}, DType::kF32},
                    std::move(features), {}});
  if (spec.label_column >= 0) fields.push_back({"label", TensorMeta{{}, DType::kI32}, {}, std::move(labels)});
  return Dataset::from_fields(spec.name, n, std::move(fields));
}

}  // namespace rill
