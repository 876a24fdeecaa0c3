// Reader for the idx format of MNIST and Fashion-MNIST: a big-endian header
// (magic 0x000008NN where 08 is u8 and NN the number of dims, then one u32 per
// dim) followed by the u8 values, row-major.
#include <cstring>

#include "kernels/data/dataset_readers.h"
#include "kernels/data/file_bytes.h"

namespace rill {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // u8, 3 dims: [N, H, W]
constexpr uint32_t kLabelsMagic = 0x00000801;  // u8, 1 dim: [N]

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

const char* describe_magic(uint32_t magic) {
  if (magic == kImagesMagic) return " (an idx images file)";
  if (magic == kLabelsMagic) return " (an idx labels file)";
  return "";
}

struct IdxFile {
  std::vector<uint8_t> bytes;
  std::vector<uint64_t> dims;
  size_t header_bytes = 0;
  const uint8_t* values() const { return bytes.data() + header_bytes; }
};

// Reads `path`, checks its magic, and checks that the file holds exactly the
// values its dims promise. `what` is "images" or "labels", for messages.
StatusOr<IdxFile> read_idx_file(const std::string& path, uint32_t expected_magic, const char* what,
                                const FileAccess& access) {
  RILL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file_bytes(path, ReadOptions{.pipes = true, .access = &access}));
  const std::string where = fmt::format("idx {} file '{}'", what, path);
  if (bytes.size() < 4) {
    return data_loss("{}: truncated file: expected at least 4 bytes of magic number, found {}", where, bytes.size());
  }
  uint32_t magic = read_be32(bytes.data());
  if (magic != expected_magic) {
    return data_loss("{}: wrong magic number: expected 0x{:08x}{}, found 0x{:08x}{}", where, expected_magic,
                     describe_magic(expected_magic), magic, describe_magic(magic));
  }
  const size_t rank = expected_magic & 0xff;
  IdxFile file;
  file.header_bytes = 4 + 4 * rank;
  if (bytes.size() < file.header_bytes) {
    return data_loss("{}: truncated file: expected a {}-byte header, found {} bytes", where, file.header_bytes,
                     bytes.size());
  }
  // Every dim is below 2^32, but their product may not fit in 64 bits; checking
  // against the file size as we multiply keeps the arithmetic exact.
  const uint64_t available = bytes.size() - file.header_bytes;
  uint64_t count = 1;
  bool too_big = false;
  for (size_t i = 0; i < rank; ++i) {
    uint64_t dim = read_be32(bytes.data() + 4 + 4 * i);
    file.dims.push_back(dim);
    if (dim == 0) return data_loss("{}: dimension {} of the header is 0", where, i);
    if (too_big || dim > available / count) {  // count * dim > available
      too_big = true;
    } else {
      count *= dim;
    }
  }
  if (too_big) {
    // Exact in 128 bits: at most three 32-bit dims.
    unsigned __int128 needed = file.header_bytes;
    unsigned __int128 values = 1;
    for (uint64_t dim : file.dims) values *= dim;
    needed += values;
    std::string expected = needed > UINT64_MAX ? "more than 2^64" : std::to_string(static_cast<uint64_t>(needed));
    return data_loss("{}: truncated file: header [{}] needs {} bytes, found {}", where, fmt::join(file.dims, ", "),
                     expected, bytes.size());
  }
  if (count < available) {
    return data_loss("{}: file has {} bytes, but header [{}] accounts for {}: unexpected trailing data", where,
                     bytes.size(), fmt::join(file.dims, ", "), file.header_bytes + count);
  }
  file.bytes = std::move(bytes);
  return file;
}

}  // namespace

StatusOr<std::shared_ptr<const Dataset>> read_idx_dataset(const DatasetSpec& spec, const FileAccess& access) {
  if (spec.images.empty()) return invalid_argument("idx dataset '{}': no images file given", spec.name);
  if (spec.labels.empty()) return invalid_argument("idx dataset '{}': no labels file given", spec.name);
  // Errors name the dataset and which of its files (a path alone does not
  // say which setting to fix).
  auto read = [&](const std::string& path, uint32_t magic, const char* what) -> StatusOr<IdxFile> {
    auto file = read_idx_file(path, magic, what, access);
    if (!file.ok()) return file.status().with_context(fmt::format("dataset '{}' ({})", spec.name, what));
    return file;
  };
  RILL_ASSIGN_OR_RETURN(IdxFile images, read(spec.images, kImagesMagic, "images"));
  RILL_ASSIGN_OR_RETURN(IdxFile labels, read(spec.labels, kLabelsMagic, "labels"));
  const uint64_t n = images.dims[0];
  if (n != labels.dims[0]) {
    return invalid_argument("idx dataset '{}': images file '{}' has {} images but labels file '{}' has {} labels",
                            spec.name, spec.images, n, spec.labels, labels.dims[0]);
  }
  const uint64_t pixels = images.dims[1] * images.dims[2];

  // The pixels stay bytes, scaled to f32 as batches are gathered: a quarter
  // of the memory, and a job starts without writing 4 bytes per pixel.
  DatasetField image{"image", TensorMeta{{static_cast<int64_t>(pixels)}, DType::kF32}, {}, {}};
  images.bytes.erase(images.bytes.begin(), images.bytes.begin() + static_cast<std::ptrdiff_t>(images.header_bytes));
  image.u8 = std::move(images.bytes);
  image.u8_scale = spec.scale;

  DatasetField label{"label", TensorMeta{{}, DType::kI32}, {}, {}};
  label.i32.resize(n);
  for (size_t i = 0; i < n; ++i) label.i32[i] = labels.values()[i];

  std::vector<DatasetField> fields;
  fields.push_back(std::move(image));
  fields.push_back(std::move(label));
  return Dataset::from_fields(spec.name, static_cast<int64_t>(n), std::move(fields));
}

}  // namespace rill
