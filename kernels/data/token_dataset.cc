// Token streams as datasets: a text file's bytes (vocabulary 256) or llm.c's
// token files, cut into non-overlapping windows of `context` inputs whose
// targets are the same tokens one on (sample i: tokens [i T, i T + T), targets
// [i T + 1, i T + T + 1)), as llm.c's loader reads them. Both fields are
// windows of one shared copy of the stream.
#include <cmath>
#include <cstring>

#include "kernels/data/dataset_readers.h"
#include "kernels/data/file_bytes.h"

namespace rill {
namespace {

// llm.c's token file header: 256 int32, [0] the magic, [1] the version
// (1: uint16 ids, 2: uint32), [2] the token count.
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

StatusOr<std::vector<int32_t>> tokens_of_file(const DatasetSpec& spec, const std::vector<uint8_t>& bytes) {
  const std::string where = fmt::format("dataset '{}': token file '{}'", spec.name, spec.path);
  if (bytes.size() < kHeaderBytes)
    return invalid_argument("{}: {} bytes, shorter than the 1024-byte header", where, bytes.size());
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  if (header[0] != kTokenFileMagic)
    return invalid_argument("{}: magic {} is not llm.c's {} (is it a token file?)", where, header[0], kTokenFileMagic);
  if (header[1] != 1 && header[1] != 2)
    return invalid_argument("{}: version {} (expected 1, uint16 ids, or 2, uint32)", where, header[1]);
  const size_t width = header[1] == 1 ? 2 : 4;
  const int64_t count = header[2];
  if (count < 0 || static_cast<size_t>(count) != (bytes.size() - kHeaderBytes) / width ||
      (bytes.size() - kHeaderBytes) % width != 0)
    return invalid_argument("{}: the header says {} tokens but {} bytes of {}-byte ids follow", where, count,
                            bytes.size() - kHeaderBytes, width);
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  const uint8_t* p = bytes.data() + kHeaderBytes;
  for (int64_t i = 0; i < count; ++i) {
    if (width == 2) {
      uint16_t id;
      std::memcpy(&id, p + i * 2, 2);
      tokens[static_cast<size_t>(i)] = id;
    } else {
      uint32_t id;
      std::memcpy(&id, p + i * 4, 4);
      if (id > static_cast<uint32_t>(INT32_MAX))
        return invalid_argument("{}: token {} at position {} is above 2^31 - 1", where, id, i);
      tokens[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
  }
  return tokens;
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
