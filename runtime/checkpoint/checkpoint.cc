#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "base/safe_files.h"
#include "runtime/checkpoint/checkpoint_dtypes.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Tensor bytes go to disk as they are in memory; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");

constexpr char kModelFile[] = "model.safetensors";
constexpr char kMetaFile[] = "meta.json";
constexpr char kLatestFile[] = "latest";
constexpr char kMetadataKey[] = "__metadata__";
constexpr int kFormat = 1;
// The safetensors reference reader refuses larger headers; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100000000;
constexpr uint64_t kMaxMetaBytes = 256u << 20;

Status os_error(const std::string& what, int err) {
  return Status(err == ENOENT ? Code::kNotFound : Code::kUnavailable,
                fmt::format("{}: {}", what, std::generic_category().message(err)));
}
Status fs_error(const std::string& what, const std::error_code& ec) {
  return Status(ec == std::errc::no_such_file_or_directory ? Code::kNotFound : Code::kUnavailable,
                fmt::format("{}: {}", what, ec.message()));
}

// Closes the descriptor on every path out.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { if (fd_ >= 0) ::close(fd_); }
  int get() const { return fd_; }
  int release() { int fd = fd_; fd_ = -1; return fd; }

 private:
  int fd_;
};

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

// Writes `pieces` (in order) to a new file and fsyncs it before returning.
Status write_file_synced(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces) {
  FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) return os_error("cannot create " + path, errno);
  for (const auto& [data, bytes] : pieces) RILL_RETURN_IF_ERROR(write_all(fd.get(), data, bytes, path));
  if (::fsync(fd.get()) != 0) return os_error("cannot fsync " + path, errno);
  if (::close(fd.release()) != 0) return os_error("cannot close " + path, errno);
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
  return fs::is_regular_file(dir / kModelFile, ec) && fs::is_regular_file(dir / kMetaFile, ec);
}

// Every complete step directory directly under `root`, by step.
std::map<int64_t, std::string> list_step_dirs(const fs::path& root) {
  std::map<int64_t, std::string> steps;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step;
    std::string name = it->path().filename().string();
    if (parse_step_name(name, &step) && is_complete_step_dir(it->path())) steps[step] = name;
  }
  return steps;
}

// A variable's optimizer state is "<variable>/<state>" where <variable> is itself
// in the checkpoint; anything else (including "layer1/w" alone) is a variable.
std::string state_of(const std::string& name, const std::set<std::string>& names) {
  size_t slash = name.rfind('/');
  if (slash == std::string::npos || slash == 0 || !names.count(name.substr(0, slash))) return "";
  return name.substr(slash + 1);
}

Status check_for_write(const Checkpoint& checkpoint, int keep_last) {
  if (keep_last < 1) return invalid_argument("checkpoint: keep_last is {}, must be at least 1", keep_last);
  if (checkpoint.step < 0) return invalid_argument("checkpoint: step is {}, must not be negative", checkpoint.step);
  std::set<std::string> seen;
  for (const CheckpointTensor& t : checkpoint.tensors) {
    if (t.name.empty() || t.name == kMetadataKey)
      return invalid_argument("checkpoint: tensor name '{}' is not allowed", t.name);
    if (!seen.insert(t.name).second) return invalid_argument("checkpoint: tensor {} appears twice", t.name);
    uint64_t n;
    if (!checked_elements(t.shape, &n) || n != t.values.size())
      return invalid_argument("checkpoint: tensor {} has shape {} but {} values", t.name, shape_string(t.shape),
                              t.values.size());
  }
  return Status::ok_status();
}

// The safetensors header, padded with spaces so the data starts 8-byte aligned.
std::string safetensors_header(const Checkpoint& checkpoint) {
  json header = json::object();
  uint64_t offset = 0;
  for (const CheckpointTensor& t : checkpoint.tensors) {
    uint64_t bytes = t.values.size() * dtype_size(t.dtype);
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  if (!checkpoint.metadata.empty()) header[kMetadataKey] = checkpoint.metadata;
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

std::string meta_json(const Checkpoint& checkpoint) {
  std::set<std::string> names;
  for (const CheckpointTensor& t : checkpoint.tensors) names.insert(t.name);
  json tensors = json::array();
  std::set<std::string> states;
  for (const CheckpointTensor& t : checkpoint.tensors) {
    std::string state = state_of(t.name, names);
    if (!state.empty()) states.insert(state);
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", safetensors_dtype(t.dtype)},
                       {"role", state.empty() ? "variable" : "optimizer_state"}});
  }
  json optimizer = {{"states", states}};
  if (auto it = checkpoint.metadata.find("optimizer"); it != checkpoint.metadata.end()) optimizer["name"] = it->second;
  json meta = {{"format", kFormat},
               {"step", checkpoint.step},
               {"job", checkpoint.job},
               {"data", {{"position", "step"}}},
               {"optimizer", optimizer},
               {"tensors", tensors}};
  return meta.dump(1) + "\n";
}

// Moves the finished temporary directory to `final_dir`. Re-writing a step that
// exists swaps the two atomically, so readers see the old or the new, never neither.
Status install(const fs::path& tmp, const fs::path& final_dir) {
  if (::rename(tmp.c_str(), final_dir.c_str()) == 0) return Status::ok_status();
  if (errno != ENOTEMPTY && errno != EEXIST)
    return os_error(fmt::format("cannot rename {} to {}", tmp.string(), final_dir.string()), errno);
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS) return os_error("cannot replace " + final_dir.string(), errno);
    // No atomic exchange on this file system: move the old one aside first.
    fs::path old = tmp.string() + ".old";
    if (::rename(final_dir.c_str(), old.c_str()) != 0)
      return os_error("cannot move aside " + final_dir.string(), errno);
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return os_error("cannot rename to " + final_dir.string(), errno);
    std::error_code ec;
    fs::remove_all(old, ec);
    return ec ? fs_error("cannot remove " + old.string(), ec) : Status::ok_status();
  }
  std::error_code ec;  // `tmp` now holds the old step directory
  fs::remove_all(tmp, ec);
  return ec ? fs_error("cannot remove " + tmp.string(), ec) : Status::ok_status();
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

// Keeps `step` and the keep_last - 1 largest smaller steps. A directory is renamed
// to a dot-name before it is removed, so a crash mid-removal leaves no half step.
Status prune(const fs::path& root, int64_t step, int keep_last) {
  std::map<int64_t, std::string> steps = list_step_dirs(root);
  int kept = 1;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->first >= step) continue;
    if (kept < keep_last) { ++kept; continue; }
    fs::path dir = root / it->second;
    fs::path doomed = root / fmt::format(".remove-{}-{}", it->second, ::getpid());
    if (::rename(dir.c_str(), doomed.c_str()) != 0)
      return os_error(fmt::format("checkpoint step {} written, but cannot remove old {}", step, dir.string()), errno);
    std::error_code ec;
    fs::remove_all(doomed, ec);
    if (ec) return fs_error(fmt::format("checkpoint step {} written, but cannot remove {}", step, doomed.string()), ec);
  }
  return Status::ok_status();
}

struct Meta {
  int64_t step = 0;
  std::string job;
  std::vector<std::pair<std::string, Shape>> tensors;
};

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

StatusOr<Meta> read_meta(const std::string& path, const FileAccess& access) {
  RILL_ASSIGN_OR_RETURN(std::string text, read_small_file(path, kMaxMetaBytes, access));
  json meta = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) return data_loss("{}: not a JSON object", path);
  auto format = meta.find("format");
  if (format == meta.end() || !format->is_number_integer() || format->get<int64_t>() != kFormat)
    return data_loss("{}: \"format\" must be {}", path, kFormat);
  Meta out;
  auto step = meta.find("step");
  if (step == meta.end() || !step->is_number_unsigned() || step->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return data_loss("{}: \"step\" must be a non-negative integer", path);
  out.step = static_cast<int64_t>(step->get<uint64_t>());
  auto job = meta.find("job");
  if (job == meta.end() || !job->is_string()) return data_loss("{}: \"job\" must be a string", path);
  out.job = job->get<std::string>();
  auto tensors = meta.find("tensors");
  if (tensors == meta.end() || !tensors->is_array()) return data_loss("{}: \"tensors\" must be an array", path);
  for (size_t i = 0; i < tensors->size(); ++i) {
    const json& t = (*tensors)[i];
    Shape shape;
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("shape") ||
        !read_dims(t["shape"], &shape))
      return data_loss("{}: tensors[{}] needs a string \"name\" and a \"shape\" of non-negative integers", path, i);
    out.tensors.emplace_back(t["name"].get<std::string>(), std::move(shape));
  }
  return out;
}

struct Entry {
  std::string name;
  Shape shape;
  uint64_t begin = 0, end = 0;
  DType dtype = DType::kF32;
};

// Parses and validates a safetensors file, then reads its tensors in data order.
Status read_model(const std::string& path, Checkpoint* out, const FileAccess& access) {
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

StatusOr<Checkpoint> read_step_dir(const fs::path& dir, const FileAccess& access) {
  const std::string meta_path = (dir / kMetaFile).string(), model_path = (dir / kModelFile).string();
  RILL_ASSIGN_OR_RETURN(Meta meta, read_meta(meta_path, access));
  Checkpoint checkpoint;
  checkpoint.step = meta.step;
  checkpoint.job = meta.job;
  RILL_RETURN_IF_ERROR(read_model(model_path, &checkpoint, access));
  int64_t dir_step;
  if (parse_step_name(dir.filename().string(), &dir_step) && dir_step != meta.step)
    return data_loss("{}: step {} does not match the directory name", meta_path, meta.step);
  if (meta.tensors.size() != checkpoint.tensors.size())
    return data_loss("{} lists {} tensors but {} holds {}", meta_path, meta.tensors.size(), model_path,
                     checkpoint.tensors.size());
  // meta.json keeps the order the tensors were written in; the model file's order
  // is ambiguous for empty tensors sharing an offset.
  std::map<std::string, CheckpointTensor*> by_name;
  for (CheckpointTensor& t : checkpoint.tensors) by_name[t.name] = &t;
  std::vector<CheckpointTensor> ordered;
  for (auto& [name, shape] : meta.tensors) {
    auto it = by_name.find(name);
    if (it == by_name.end() || it->second == nullptr)
      return data_loss("{} lists tensor {}, which {} does not hold (or it is listed twice)", meta_path, name,
                       model_path);
    if (it->second->shape != shape)
      return data_loss("{}: tensor {} has shape {} but {} has {}", meta_path, name, shape_string(shape), model_path,
                       shape_string(it->second->shape));
    ordered.push_back(std::move(*it->second));
    it->second = nullptr;
  }
  checkpoint.tensors = std::move(ordered);
  return checkpoint;
}

}  // namespace

std::string checkpoint_step_name(int64_t step) { return fmt::format("step-{:08d}", step); }

Status check_checkpoint_dir(const std::string& dir, const FileAccess& access) {
  std::error_code ec;
  RILL_RETURN_IF_ERROR(check_own_folder(dir, "checkpoint.dir"));  // before it is made too: not through a link
  RILL_RETURN_IF_ERROR(make_private_folders(dir, "checkpoint.dir"));
  RILL_RETURN_IF_ERROR(check_own_folder(dir, "checkpoint.dir"));
  RILL_RETURN_IF_ERROR(check_folder_as_opened(dir, access));
  const std::string probe = (fs::path(dir) / fmt::format(".rill-write-test-{}", ::getpid())).string();
  FileDescriptor fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return os_error("checkpoint.dir: cannot write in " + dir, errno);
  fs::remove(probe, ec);
  return Status::ok_status();
}

std::vector<int64_t> checkpoint_steps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return steps;
  for (const auto& [step, name] : list_step_dirs(root)) steps.push_back(step);
  return steps;
}

Status claim_checkpoint_dir(const std::string& dir, const std::string& resume, bool overwrite) {
  const std::vector<int64_t> steps = checkpoint_steps(dir);
  if (steps.empty()) return {};
  if (!resume.empty()) {
    std::error_code ec;
    const std::string root = fs::weakly_canonical(dir, ec).string(), from = fs::weakly_canonical(resume, ec).string();
    if (resume == "latest" || from == root || from.rfind(root + "/", 0) == 0) return {};  // continuing them
  }
  if (!overwrite)
    return Status(Code::kFailedPrecondition,
                  fmt::format("checkpoint.dir '{}' holds step(s) {} of a run before this one: resume it (--resume "
                              "latest), name another dir, or --set checkpoint.overwrite=true to replace them",
                              dir, fmt::join(steps, ", ")));
  std::error_code ec;
  for (int64_t step : steps) {
    fs::remove_all(fs::path(dir) / checkpoint_step_name(step), ec);
    if (ec) return fs_error("checkpoint.overwrite: cannot remove " + checkpoint_step_name(step) + " in " + dir, ec);
  }
  fs::remove(fs::path(dir) / kLatestFile, ec);
  if (ec) return fs_error("checkpoint.overwrite: cannot remove latest in " + dir, ec);
  return {};
}

Status write_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep_last, const FileAccess& access) {
  if (dir.empty()) return invalid_argument("checkpoint: the directory is empty");
  RILL_RETURN_IF_ERROR(check_for_write(checkpoint, keep_last));
  std::string header, meta;
  try {
    header = safetensors_header(checkpoint);
    meta = meta_json(checkpoint);
  } catch (const json::exception& e) {  // only invalid UTF-8 in a name, the job or metadata
    return invalid_argument("checkpoint: names, job and metadata must be UTF-8: {}", e.what());
  }
  const fs::path root(dir);
  std::error_code ec;
  // Checked at every write along its whole path: no other user can have
  // changed any part of it since, nor can later (check_own_folder).
  RILL_RETURN_IF_ERROR(check_own_folder(dir, "checkpoint.dir"));
  RILL_RETURN_IF_ERROR(make_private_folders(dir, "checkpoint.dir"));
  RILL_RETURN_IF_ERROR(check_own_folder(dir, "checkpoint.dir"));
  RILL_RETURN_IF_ERROR(check_folder_as_opened(dir, access));
  const std::string name = checkpoint_step_name(checkpoint.step);
  const fs::path tmp = root / fmt::format(".tmp-{}-{}", name, ::getpid());
  fs::remove_all(tmp, ec);  // left by an earlier failed attempt of this process
  if (ec) return fs_error("cannot remove " + tmp.string(), ec);
  if (!fs::create_directory(tmp, ec)) return fs_error("cannot create " + tmp.string(), ec);

  const uint64_t header_bytes = header.size();
  std::vector<std::pair<const void*, size_t>> pieces = {{&header_bytes, 8}, {header.data(), header.size()}};
  std::vector<std::vector<std::byte>> encoded;  // the 16-bit tensors' bytes
  encoded.reserve(checkpoint.tensors.size());
  for (const CheckpointTensor& t : checkpoint.tensors) {
    if (dtype_size(t.dtype) == sizeof(float)) {
      pieces.emplace_back(t.values.data(), t.values.size() * sizeof(float));
      continue;
    }
    encoded.push_back(encode_values(t.values, t.dtype));
    pieces.emplace_back(encoded.back().data(), encoded.back().size());
  }
  Status status = write_file_synced((tmp / kModelFile).string(), pieces);
  if (status.ok()) status = write_file_synced((tmp / kMetaFile).string(), {{meta.data(), meta.size()}});
  if (status.ok()) status = sync_directory(tmp.string());
  if (status.ok()) status = install(tmp, root / name);
  if (!status.ok()) {
    fs::remove_all(tmp, ec);
    return status;
  }
  RILL_RETURN_IF_ERROR(sync_directory(root.string()));
  RILL_RETURN_IF_ERROR(write_latest(root, name));
  return prune(root, checkpoint.step, keep_last);
}

StatusOr<std::string> latest_checkpoint(const std::string& root, const FileAccess& access) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return not_found("checkpoint root {} {}", root, fs::exists(root, ec) ? "is not a directory" : "does not exist");
  auto latest = read_small_file((fs::path(root) / kLatestFile).string(), 4096, access);
  if (latest.ok()) {
    std::string name = *latest;
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    int64_t step;
    if (parse_step_name(name, &step) && is_complete_step_dir(fs::path(root) / name))
      return (fs::path(root) / name).string();
  }
  // `latest` missing or stale (e.g. its directory was removed by hand): the largest complete step.
  std::map<int64_t, std::string> steps = list_step_dirs(root);
  if (steps.empty()) return not_found("no complete checkpoint under {}", root);
  return (fs::path(root) / steps.rbegin()->second).string();
}

StatusOr<Checkpoint> read_checkpoint(const std::string& path, const FileAccess& access) {
  fs::path p(path);
  if (p.filename().empty()) p = p.parent_path();  // "ckpt/step-00000120/"
  std::error_code ec;
  if (!fs::is_directory(p, ec))
    return not_found("checkpoint {} {}", path, fs::exists(p, ec) ? "is not a directory" : "does not exist");
  int64_t step;
  // A step directory by its name or its files; otherwise a root to resolve.
  bool step_dir = parse_step_name(p.filename().string(), &step) || fs::exists(p / kModelFile, ec) ||
                  fs::exists(p / kMetaFile, ec);
  if (step_dir) return read_step_dir(p, access);
  RILL_ASSIGN_OR_RETURN(std::string dir, latest_checkpoint(path, access));
  return read_step_dir(dir, access);
}

}  // namespace rill
