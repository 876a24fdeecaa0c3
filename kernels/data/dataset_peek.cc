#include "kernels/data/dataset_peek.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/file_access.h"
#include "kernels/data/csv_cells.h"

namespace rill {
namespace {

struct GzClose {
  void operator()(gzFile f) const { gzclose(f); }
};
using Gz = std::unique_ptr<gzFile_s, GzClose>;

// Opens a plain or gzip file (zlib reads either).
StatusOr<Gz> open_file(const std::string& path, const std::string& dataset) {
  Gz file(gzopen(path.c_str(), "rb"));
  if (!file) return invalid_argument("dataset '{}': cannot open '{}'", dataset, path);
  return file;
}

}  // namespace

Status data_mismatch(const std::string& input, const std::string& field, const DatasetSpec& spec,
                     const TensorMeta& declared, const TensorMeta& held) {
  std::string files;
  if (spec.kind == "idx") files = fmt::format(" (images '{}', labels '{}')", spec.images, spec.labels);
  if (spec.kind == "csv" || spec.kind == "text" || spec.kind == "tokens") files = fmt::format(" (file '{}')", spec.path);
  return invalid_argument("input '{}' reads field '{}' of dataset '{}'{}: the job declares {} {} per sample, the data "
                          "holds {} {}",
                          input, field, spec.name, files, shape_string(declared.shape), dtype_name(declared.dtype),
                          shape_string(held.shape), dtype_name(held.dtype));
}

Status index_outside(const std::string& input, const std::string& field, const DatasetSpec& spec,
                     const OutsideValue& outside, int64_t bound, const std::string& reader) {
  const std::string where =
      outside.stream_position >= 0
          ? fmt::format("at token {} of '{}'", outside.stream_position, spec.path)
          : fmt::format("in sample {}, element {}", outside.sample, outside.element);
  return invalid_argument("input '{}' reads field '{}' of dataset '{}': value {} {} is not in [0, {}), the "
                          "indices op {} reads",
                          input, field, spec.name, outside.value, where, bound, reader);
}

std::string unreadable_here(const DatasetSpec& spec) {
  std::vector<std::string> files;
  if (spec.kind == "idx") files = {spec.images, spec.labels};
  if (spec.kind == "csv" || spec.kind == "text" || spec.kind == "tokens") files = {spec.path};
  for (const std::string& file : files) {
    struct stat st{};
    if (::stat(file.c_str(), &st) != 0) {
      const int error = errno;
      return fmt::format("dataset '{}': '{}'{} {}", spec.name, file, relative_note(file),
                         error == ENOENT ? "does not exist here"
                                         : fmt::format("cannot be read here: {}", std::strerror(error)));
    }
    if (S_ISDIR(st.st_mode)) return fmt::format("dataset '{}': '{}' is a directory, not a file", spec.name, file);
    if (!S_ISREG(st.st_mode))
      return fmt::format("dataset '{}': '{}' is not a regular file (a pipe or a device), read as a stream where the "
                         "job runs",
                         spec.name, file);
    if (::access(file.c_str(), R_OK) != 0)
      return fmt::format("dataset '{}': '{}' cannot be read here: {}", spec.name, file, std::strerror(errno));
  }
  return "";
}

StatusOr<std::optional<std::vector<PeekedField>>> peek_dataset_fields(const DatasetSpec& spec) {
  if (const std::string why = unreadable_here(spec); !why.empty()) return Status(Code::kUnavailable, why);
  if (spec.kind == "idx") {
    RILL_ASSIGN_OR_RETURN(Gz file, open_file(spec.images, spec.name));
    unsigned char head[16];
    if (gzread(file.get(), head, sizeof head) != static_cast<int>(sizeof head))
      return data_loss("dataset '{}': '{}' is shorter than an idx images header (16 bytes)", spec.name, spec.images);
    auto be32 = [&](int at) {
      return (uint32_t{head[at]} << 24) | (uint32_t{head[at + 1]} << 16) | (uint32_t{head[at + 2]} << 8) | head[at + 3];
    };
    if (be32(0) != 0x00000803)
      return data_loss("dataset '{}': '{}' is not an idx images file (magic 0x{:08x}, expected 0x00000803)", spec.name,
                       spec.images, be32(0));
    const int64_t pixels = int64_t{be32(8)} * int64_t{be32(12)};
    return std::optional<std::vector<PeekedField>>(
        std::vector<PeekedField>{{"image", {{pixels}, DType::kF32}}, {"label", {{}, DType::kI32}}});
  }
  if (spec.kind == "csv") {
    // The first line that is not blank fixes the columns (a header too), as
    // the reader counts them: read until it has ended.
    RILL_ASSIGN_OR_RETURN(Gz file, open_file(spec.path, spec.name));
    std::string head;
    std::vector<std::string_view> cells;
    size_t scanned = 0;  // lines before this are blank
    for (;;) {
      const size_t newline = head.find('\n', scanned);
      if (newline != std::string::npos || gzeof(file.get())) {
        const std::string_view line(head.data() + scanned, (newline == std::string::npos ? head.size() : newline) - scanned);
        if (!csv::trim(line).empty()) {
          csv::split_cells(line, &cells);
          break;
        }
        if (newline == std::string::npos) break;  // the file ended blank
        scanned = newline + 1;
        continue;
      }
      char chunk[1 << 16];
      const int got = gzread(file.get(), chunk, sizeof chunk);
      if (got < 0) return data_loss("dataset '{}': cannot read '{}'", spec.name, spec.path);
      head.append(chunk, static_cast<size_t>(got));
      if (got == 0 && !gzeof(file.get())) return data_loss("dataset '{}': cannot read '{}'", spec.name, spec.path);
    }
    if (cells.empty()) return data_loss("dataset '{}': '{}' has no line to read", spec.name, spec.path);
    const int64_t columns = static_cast<int64_t>(cells.size());
    const int64_t features = columns - (spec.label_column >= 0 ? 1 : 0);
    std::vector<PeekedField> fields{{"features", {{features}, DType::kF32}}};
    if (spec.label_column >= 0) fields.push_back({"label", {{}, DType::kI32}});
    return std::optional<std::vector<PeekedField>>(std::move(fields));
  }
  if (spec.kind == "text" || spec.kind == "tokens") {
    // The fields are the spec's; the file must open (and a token file start
    // with llm.c's magic).
    RILL_ASSIGN_OR_RETURN(Gz file, open_file(spec.path, spec.name));
    if (spec.kind == "tokens") {
      int32_t magic = 0;
      if (gzread(file.get(), &magic, sizeof magic) != static_cast<int>(sizeof magic) || magic != kTokenFileMagic)
        return data_loss("dataset '{}': '{}' is not an llm.c token file (magic {}, expected {})", spec.name,
                         spec.path, magic, kTokenFileMagic);
    }
    const TensorMeta window{{spec.context}, DType::kI32};
    return std::optional<std::vector<PeekedField>>(std::vector<PeekedField>{{"tokens", window}, {"targets", window}});
  }
  return std::optional<std::vector<PeekedField>>();
}

}  // namespace rill
