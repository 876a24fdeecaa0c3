#include "runtime/checkpoint/checkpoint_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <system_error>

#include "base/safe_files.h"
#include "runtime/checkpoint/checkpoint_dtypes.h"

namespace rill::checkpoint_io {

// Tensor bytes go to disk as they are in memory; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");
namespace {
constexpr char kMetadataKey[] = "__metadata__";
// The safetensors reference reader refuses larger headers; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100000000;
}  // namespace

Status os_error(const std::string& what, int err) {
  return Status(err == ENOENT ? Code::kNotFound : Code::kUnavailable,
                fmt::format("{}: {}", what, std::generic_category().message(err)));
}
Status fs_error(const std::string& what, const std::error_code& ec) {
  return Status(ec == std::errc::no_such_file_or_directory ? Code::kNotFound : Code::kUnavailable,
                fmt::format("{}: {}", what, ec.message()));
}

Status write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error("cannot write " + path, errno);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok_status();
}

Status read_at(int fd, void* data, size_t bytes, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error("cannot read " + path, errno);
    if (n == 0) return data_loss("{}: file ended early at byte {}", path, offset);
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok_status();
}

namespace {
constexpr size_t kWriteChunk = size_t{256} << 10;
// The file is written back by windows as it grows: each full window is
// started, and the one before it waited for, so at most two windows wait
// for the disk, write() takes the disk's pace, and the final fsync has at
// most two windows left to write.
constexpr uint64_t kWriteBackWindow = uint64_t{1} << 20;

void write_back(int fd, uint64_t written, uint64_t before) {
  // Advice: a file system without it still has the final fsync, which
  // reports any error.
  if (written / kWriteBackWindow == before / kWriteBackWindow) return;
  const uint64_t window = (written / kWriteBackWindow - 1) * kWriteBackWindow;
  (void)::sync_file_range(fd, static_cast<off_t>(window), kWriteBackWindow, SYNC_FILE_RANGE_WRITE);
  if (window >= kWriteBackWindow)
    (void)::sync_file_range(fd, static_cast<off_t>(window - kWriteBackWindow), kWriteBackWindow,
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
}
}  // namespace

Status write_file_synced(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces,
                         const WriteObserver& observe) {
  FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) return os_error("cannot create " + path, errno);
  uint64_t total = 0, written = 0;
  for (const auto& piece : pieces) total += piece.second;
  if (observe) observe(0, total);  // its size, before any of it
  for (const auto& [data, bytes] : pieces)
    for (size_t at = 0; at < bytes; at += kWriteChunk) {
      const size_t n = std::min(kWriteChunk, bytes - at);
      RILL_RETURN_IF_ERROR(write_all(fd.get(), static_cast<const char*>(data) + at, n, path));
      write_back(fd.get(), written + n, written);
      written += n;
      // The last chunk is told once the file is on the disk.
      if (observe && written < total) observe(written, total);
    }
  if (::fsync(fd.get()) != 0) return os_error("cannot fsync " + path, errno);
  if (::close(fd.release()) != 0) return os_error("cannot close " + path, errno);
  if (observe) observe(total, total);
  return Status::ok_status();
}

// The checkpoint folder, opened: a folder of this user's (or root's) within
// `access`, as the kernel resolved it, so a link swapped in since the job
// was checked is caught.
Status check_folder_as_opened(const std::string& dir, const FileAccess& access) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return os_error("checkpoint.dir: cannot open " + dir, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return os_error("checkpoint.dir: cannot stat " + dir, errno);
  return check_opened_file(fd.get(), st, dir, access, "checkpoint.dir");
}

// Makes a directory's entries (a rename, a new file) durable.
Status sync_directory(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return os_error("cannot open directory " + path, errno);
  if (::fsync(fd.get()) != 0) return os_error("cannot fsync directory " + path, errno);
  return Status::ok_status();
}

StatusOr<std::string> read_small_file(const std::string& path, uint64_t limit, const FileAccess& access) {
  struct stat st {};
  RILL_ASSIGN_OR_RETURN(const int opened, open_checked(path, access, "checkpoint file", false, &st));
  FileDescriptor fd(opened);
  if (static_cast<uint64_t>(st.st_size) > limit)
    return data_loss("{}: {} bytes is more than {}", path, st.st_size, limit);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  RILL_RETURN_IF_ERROR(read_at(fd.get(), text.data(), text.size(), 0, path));
  return text;
}

// Elements of `shape`, or false if a dimension is negative or the count overflows.
bool checked_elements(const Shape& shape, uint64_t* out) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  if (n > (UINT64_MAX >> 3)) return false;  // bytes = n * 4 must not overflow either
  *out = n;
  return true;
}

// "step-00000120" -> 120; only the canonical spelling counts.
bool parse_step_name(const std::string& name, int64_t* step) {
  if (name.size() < 6 || name.size() > 5 + 18 || name.compare(0, 5, "step-") != 0) return false;
  int64_t value = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    value = value * 10 + (name[i] - '0');
  }
  if (checkpoint_step_name(value) != name) return false;
  *step = value;
  return true;
}

bool is_complete_step_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kMetaFile, ec);
}

std::map<int64_t, std::string> list_step_dirs(const fs::path& root, bool complete) {
  std::map<int64_t, std::string> steps;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step;
    std::string name = it->path().filename().string();
    if (parse_step_name(name, &step) && is_complete_step_dir(it->path()) == complete) steps[step] = name;
  }
  return steps;
}

// The safetensors header, padded with spaces so the data starts 8-byte aligned.
std::string safetensors_header(const std::vector<CheckpointTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const CheckpointTensor& t : tensors) {
    uint64_t bytes = t.values.size() * dtype_size(t.dtype);
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}


Status write_safetensors(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                         const std::map<std::string, std::string>& metadata, const WriteObserver& observe) {
  std::string header;
  try {
    header = safetensors_header(tensors, metadata);
  } catch (const json::exception& e) {  // only invalid UTF-8 in a name or the metadata
    return invalid_argument("checkpoint: names and metadata must be UTF-8: {}", e.what());
  }
  const uint64_t header_bytes = header.size();
  std::vector<std::pair<const void*, size_t>> pieces = {{&header_bytes, 8}, {header.data(), header.size()}};
  std::vector<std::vector<std::byte>> encoded;  // the 16-bit tensors' bytes
  encoded.reserve(tensors.size());
  for (const CheckpointTensor& t : tensors) {
    if (dtype_size(t.dtype) == sizeof(float)) {
      pieces.emplace_back(t.values.data(), t.values.size() * sizeof(float));
      continue;
    }
    encoded.push_back(encode_values(t.values, t.dtype));
    pieces.emplace_back(encoded.back().data(), encoded.back().size());
  }
  return write_file_synced(path, pieces, observe);
}

Status prepare_root(const std::string& dir, const FileAccess& access) {
  // Checked at every write along its whole path: no other user can have
  // changed any part of it since, nor can later (check_own_folder).
  RILL_RETURN_IF_ERROR(check_own_folder(dir, "checkpoint.dir"));
  RILL_RETURN_IF_ERROR(make_private_folders(dir, "checkpoint.dir"));
  RILL_RETURN_IF_ERROR(check_own_folder(dir, "checkpoint.dir"));
  return check_folder_as_opened(dir, access);
}

Status write_latest(const fs::path& root, const std::string& step_name) {
  std::string tmp = (root / fmt::format(".{}.tmp-{}", kLatestFile, ::getpid())).string();
  std::string text = step_name + "\n";
  RILL_RETURN_IF_ERROR(write_file_synced(tmp, {{text.data(), text.size()}}));
  std::string latest = (root / kLatestFile).string();
  if (::rename(tmp.c_str(), latest.c_str()) != 0)
    return os_error(fmt::format("cannot rename {} to {}", tmp, latest), errno);
  return sync_directory(root.string());
}

Status prune(const fs::path& root, int64_t step, int keep_last) {
  std::vector<std::string> doomed_steps;
  std::map<int64_t, std::string> steps = list_step_dirs(root, true);
  int kept = 1;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->first >= step) continue;
    if (kept < keep_last) { ++kept; continue; }
    doomed_steps.push_back(it->second);
  }
  // Steps before this one that never became whole (a node lost while
  // writing): nothing will finish them.
  for (const auto& [s, name] : list_step_dirs(root, false))
    if (s < step) doomed_steps.push_back(name);
  for (const std::string& name : doomed_steps) {
    fs::path dir = root / name;
    fs::path doomed = root / fmt::format(".remove-{}-{}", name, ::getpid());
    if (::rename(dir.c_str(), doomed.c_str()) != 0)
      return os_error(fmt::format("checkpoint step {} written, but cannot remove old {}", step, dir.string()), errno);
    std::error_code ec;
    fs::remove_all(doomed, ec);
    if (ec) return fs_error(fmt::format("checkpoint step {} written, but cannot remove {}", step, doomed.string()), ec);
  }
  return Status::ok_status();
}

// Reads a JSON array of non-negative integers that fit int64.
bool read_dims(const json& value, Shape* out) {
  if (!value.is_array()) return false;
  out->clear();
  for (const json& d : value) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
    out->push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  return true;
}

struct Entry {
  std::string name;
  Shape shape;
  uint64_t begin = 0, end = 0;
  DType dtype = DType::kF32;
};

Status read_safetensors(const std::string& path, Checkpoint* out, const FileAccess& access) {
  struct stat st {};
  RILL_ASSIGN_OR_RETURN(const int opened, open_checked(path, access, "checkpoint file", false, &st));
  FileDescriptor fd(opened);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) return data_loss("{}: {} bytes, too short for the 8-byte header length", path, size);
  uint64_t header_bytes = 0;
  RILL_RETURN_IF_ERROR(read_at(fd.get(), &header_bytes, 8, 0, path));
  if (header_bytes > size - 8)
    return data_loss("{}: header length {} runs past the end of the file ({} bytes)", path, header_bytes, size);
  if (header_bytes > kMaxHeaderBytes)
    return data_loss("{}: header length {} is over the limit {}", path, header_bytes, kMaxHeaderBytes);
  std::string text(header_bytes, '\0');
  RILL_RETURN_IF_ERROR(read_at(fd.get(), text.data(), text.size(), 8, path));
  json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return data_loss("{}: header is not a JSON object", path);
  const uint64_t data_start = 8 + header_bytes, data_bytes = size - data_start;

  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) return data_loss("{}: {} is not an object", path, kMetadataKey);
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) return data_loss("{}: {} value of \"{}\" is not a string", path, kMetadataKey, key);
        out->metadata[key] = v.get<std::string>();
      }
      continue;
    }
    Entry e{name, {}, 0, 0, DType::kF32};
    if (!value.is_object()) return data_loss("{}: tensor {} is not an object", path, name);
    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) return data_loss("{}: tensor {} has no dtype", path, name);
    if (!parse_safetensors_dtype(dtype->get<std::string>(), &e.dtype))
      return data_loss("{}: tensor {} has dtype {}; F32, I32, BF16 and F16 are read", path, name, dtype->dump());
    auto shape = value.find("shape");
    if (shape == value.end() || !read_dims(*shape, &e.shape))
      return data_loss("{}: tensor {} needs a shape of non-negative integers", path, name);
    auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned())
      return data_loss("{}: tensor {} needs data_offsets [begin, end]", path, name);
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_bytes)
      return data_loss("{}: tensor {} data_offsets [{}, {}] lie outside the {} data bytes", path, name, e.begin, e.end,
                       data_bytes);
    const uint64_t element = dtype_size(e.dtype);
    if (e.begin % element != 0)
      return data_loss("{}: tensor {} begins at misaligned offset {}", path, name, e.begin);
    uint64_t n;
    if (!checked_elements(e.shape, &n) || n * element != e.end - e.begin)
      return data_loss("{}: tensor {} has shape {} but {} data bytes", path, name, shape_string(e.shape),
                       e.end - e.begin);
    entries.push_back(std::move(e));
  }
  // As in the reference reader: tensors tile the data section exactly.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].begin < covered)
      return data_loss("{}: tensors {} and {} overlap", path, entries[i - 1].name, entries[i].name);
    if (entries[i].begin > covered)
      return data_loss("{}: no tensor covers data bytes [{}, {})", path, covered, entries[i].begin);
    covered = entries[i].end;
  }
  if (covered != data_bytes) return data_loss("{}: {} data bytes but tensors cover {}", path, data_bytes, covered);

  for (Entry& e : entries) {
    std::vector<std::byte> bytes(e.end - e.begin);
    RILL_RETURN_IF_ERROR(read_at(fd.get(), bytes.data(), bytes.size(), data_start + e.begin, path));
    const size_t count = bytes.size() / dtype_size(e.dtype);
    out->tensors.push_back({std::move(e.name), std::move(e.shape), decode_values(bytes.data(), count, e.dtype), e.dtype});
  }
  return Status::ok_status();
}

}  // namespace rill::checkpoint_io
