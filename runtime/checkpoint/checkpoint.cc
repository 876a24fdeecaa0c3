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

#include "base/safe_files.h"
#include "runtime/checkpoint/checkpoint_dtypes.h"
#include "runtime/checkpoint/checkpoint_io.h"
#include "runtime/checkpoint/checkpoint_pieces.h"

namespace rill {
namespace {

using namespace checkpoint_io;

constexpr char kMetadataKey[] = "__metadata__";
constexpr int kFormat = 1;

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

struct Meta {
  int64_t step = 0;
  std::string job;
  std::vector<std::pair<std::string, Shape>> tensors;
};

StatusOr<json> read_meta_json(const std::string& path, const FileAccess& access) {
  RILL_ASSIGN_OR_RETURN(std::string text, read_small_file(path, kMaxMetaBytes, access));
  json meta = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) return data_loss("{}: not a JSON object", path);
  auto format = meta.find("format");
  if (format == meta.end() || !format->is_number_integer() || format->get<int64_t>() < 1 || format->get<int64_t>() > 2)
    return data_loss("{}: \"format\" must be 1 or 2", path);
  return meta;
}

StatusOr<Meta> read_meta(const json& meta, const std::string& path) {
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

StatusOr<Checkpoint> read_step_dir(const fs::path& dir, const FileAccess& access) {
  const std::string meta_path = (dir / kMetaFile).string(), model_path = (dir / kModelFile).string();
  RILL_ASSIGN_OR_RETURN(json text, read_meta_json(meta_path, access));
  int64_t dir_step;
  if (text["format"].get<int64_t>() == 2) {
    // Written by every node (checkpoint_pieces.h).
    RILL_ASSIGN_OR_RETURN(Checkpoint pieced, read_pieced_step(dir, text, meta_path, access));
    if (parse_step_name(dir.filename().string(), &dir_step) && dir_step != pieced.step)
      return data_loss("{}: step {} does not match the directory name", meta_path, pieced.step);
    return pieced;
  }
  RILL_ASSIGN_OR_RETURN(Meta meta, read_meta(text, meta_path));
  Checkpoint checkpoint;
  checkpoint.step = meta.step;
  checkpoint.job = meta.job;
  RILL_RETURN_IF_ERROR(read_safetensors(model_path, &checkpoint, access));
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
  RILL_RETURN_IF_ERROR(prepare_root(dir, access));  // checked before it is made too: not through a link
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
  std::string meta;
  try {
    meta = meta_json(checkpoint);
  } catch (const json::exception& e) {  // only invalid UTF-8 in a name, the job or metadata
    return invalid_argument("checkpoint: names, job and metadata must be UTF-8: {}", e.what());
  }
  const fs::path root(dir);
  std::error_code ec;
  RILL_RETURN_IF_ERROR(prepare_root(dir, access));
  const std::string name = checkpoint_step_name(checkpoint.step);
  const fs::path tmp = root / fmt::format(".tmp-{}-{}", name, ::getpid());
  fs::remove_all(tmp, ec);  // left by an earlier failed attempt of this process
  if (ec) return fs_error("cannot remove " + tmp.string(), ec);
  if (!fs::create_directory(tmp, ec)) return fs_error("cannot create " + tmp.string(), ec);
  Status status = write_safetensors((tmp / kModelFile).string(), checkpoint.tensors, checkpoint.metadata);
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
