// Token streams as datasets: a text file's bytes (vocabulary 256) or llm.c's
// token files, cut into non-overlapping windows of `context` inputs whose
// targets are the same tokens one on (sample i: tokens [i T, i T + T), targets
// [i T + 1, i T + T + 1)), as llm.c's loader reads them. Both fields are
// windows of one shared copy of the stream.
#include <cmath>
#include <cstring>

#include "kernels/data/dataset_readers.h"
#include "kernels/data/file_bytes.h"
#include "kernels/data/token_file.h"

namespace rill {
namespace {

StatusOr<std::vector<int32_t>> tokens_of_file(const DatasetSpec& spec, const std::vector<uint8_t>& bytes) {
  return parse_token_file(bytes, fmt::format("dataset '{}': token file '{}'", spec.name, spec.path));
}

}  // namespace

StatusOr<std::shared_ptr<const Dataset>> read_token_dataset(const DatasetSpec& spec, const FileAccess& access) {
  const std::string where = fmt::format("dataset '{}' ({} '{}')", spec.name, spec.kind, spec.path);
  if (spec.context < 1) return invalid_argument("{}: context is {}; it must be at least 1", where, spec.context);
  if (!(spec.split_from >= 0 && spec.split_from < spec.split_to && spec.split_to <= 1))
    return invalid_argument("{}: split [{}, {}] must be fractions with 0 <= from < to <= 1", where, spec.split_from,
                            spec.split_to);
  auto read = read_file_bytes(spec.path, ReadOptions{.access = &access});
  if (!read.ok()) return read.status().with_context(fmt::format("dataset '{}' (path)", spec.name));
  std::vector<uint8_t> bytes = std::move(*read);
  std::vector<int32_t> stream;
  if (spec.kind == "text") {
    stream.assign(bytes.begin(), bytes.end());
  } else {
    RILL_ASSIGN_OR_RETURN(stream, tokens_of_file(spec, bytes));
  }
  const auto n = static_cast<int64_t>(stream.size());
  const auto begin = static_cast<int64_t>(std::floor(spec.split_from * static_cast<double>(n)));
  const auto end = static_cast<int64_t>(std::floor(spec.split_to * static_cast<double>(n)));
  const int64_t windows = (end - begin - 1) / spec.context;
  if (windows < 1)
    return invalid_argument("{}: {} tokens in split [{}, {}] hold no window of context {} + 1", where, end - begin,
                            spec.split_from, spec.split_to, spec.context);
  auto shared = std::make_shared<const std::vector<int32_t>>(stream.begin() + begin, stream.begin() + end);
  std::vector<DatasetField> fields(2);
  fields[0].name = "tokens";
  fields[1].name = "targets";
  for (int f = 0; f < 2; ++f) {
    fields[f].meta = {{spec.context}, DType::kI32};
    fields[f].windows = shared;
    fields[f].window_stride = spec.context;
    fields[f].window_offset = f;
    fields[f].window_origin = begin;
  }
  return Dataset::from_fields(spec.name, windows, std::move(fields));
}

}  // namespace rill
