// The file-system work under the checkpoint store (checkpoint.h) and the
// per-node pieces (checkpoint_pieces.h): synced writes, checked reads,
// safetensors files, step folders, `latest` and pruning. Internal to
// runtime/checkpoint/.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file_access.h"
#include "base/status.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/write_observer.h"

namespace rill::checkpoint_io {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline constexpr char kModelFile[] = "model.safetensors";
inline constexpr char kMetaFile[] = "meta.json";
inline constexpr char kLatestFile[] = "latest";
inline constexpr uint64_t kMaxMetaBytes = 256u << 20;

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

Status os_error(const std::string& what, int err);
Status fs_error(const std::string& what, const std::error_code& ec);
Status read_at(int fd, void* data, size_t bytes, uint64_t offset, const std::string& path);
// Writes `pieces` (in order) to a new file (0600) and fsyncs it before
// returning. The file goes to the kernel by chunks of at most 256 KiB, each
// told to `observe` (first its size, 0 bytes done; the last chunk once the
// fsync is done), and is written back
// to the disk by windows of 1 MiB as it grows, so a slow disk's pace shows
// as the write goes on: the fsync writes at most 2 MiB.
Status write_file_synced(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces,
                         const WriteObserver& observe = {});
// Makes a directory's entries (a rename, a new file) durable.
Status sync_directory(const std::string& path);
StatusOr<std::string> read_small_file(const std::string& path, uint64_t limit, const FileAccess& access);
// Elements of `shape`, or false if a dimension is negative or the count overflows.
bool checked_elements(const Shape& shape, uint64_t* out);
// Reads a JSON array of non-negative integers that fit int64.
bool read_dims(const json& value, Shape* out);

// The checkpoint root, made if needed and checked along its whole path as
// it is opened: this user's (or, in a shared folder, not another's), and
// within `access`. Run before every write.
Status prepare_root(const std::string& dir, const FileAccess& access);
// "step-00000120" -> 120; only the canonical spelling counts.
bool parse_step_name(const std::string& name, int64_t* step);
// A step folder is complete once its meta.json is there: meta.json is
// written last, whoever writes the tensors.
bool is_complete_step_dir(const fs::path& dir);
// The step folders directly under `root` that are complete (or, with
// `complete` false, those that are not), by step.
std::map<int64_t, std::string> list_step_dirs(const fs::path& root, bool complete = true);
// Points `latest` at `step_name`, atomically and durably.
Status write_latest(const fs::path& root, const std::string& step_name);
// Keeps `step` and the keep_last - 1 largest complete smaller steps, and
// removes the incomplete steps before `step` (nothing will finish them). A
// folder is renamed to a dot-name before it is removed, so a crash
// mid-removal leaves no half step.
Status prune(const fs::path& root, int64_t step, int keep_last);

// A safetensors file of `tensors`, in order, with `metadata` as its
// __metadata__, written and fsynced (its progress told to `observe`).
Status write_safetensors(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                         const std::map<std::string, std::string>& metadata, const WriteObserver& observe = {});
// Parses and validates a safetensors file, then appends its tensors (in data
// order) and metadata to `out`.
Status read_safetensors(const std::string& path, Checkpoint* out, const FileAccess& access);

}  // namespace rill::checkpoint_io
