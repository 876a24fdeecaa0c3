#include "runtime/checkpoint/checkpoint_pieces.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/safe_files.h"
#include "runtime/checkpoint/checkpoint_dtypes.h"
#include "runtime/checkpoint/checkpoint_io.h"
#include "runtime/node/carried_state.h"
#include "runtime/node/plan_reader.h"

namespace rill {
namespace {

using namespace checkpoint_io;

bool whole(const TensorPiece& p) {
  return p.shape == p.logical && std::all_of(p.offset.begin(), p.offset.end(), [](int64_t o) { return o == 0; });
}

// A piece's name in its node's file: the tensor's own when the piece is the
// whole tensor, else "<tensor>@<offset>" ("w1@0,128").
std::string piece_key(const TensorPiece& p) {
  return whole(p) ? p.tensor : fmt::format("{}@{}", p.tensor, fmt::join(p.offset, ","));
}

// The elements of a shape, or -1 when a dimension is negative or the count
// (or its bytes) overflows.
int64_t elements_of(const Shape& shape) {
  uint64_t n = 0;
  return checked_elements(shape, &n) ? static_cast<int64_t>(n) : -1;
}

// The block lies inside its tensor, and neither's size overflows.
bool inside(const TensorPiece& p) {
  if (p.offset.size() != p.logical.size() || p.shape.size() != p.logical.size()) return false;
  if (elements_of(p.logical) < 0 || elements_of(p.shape) < 0) return false;
  for (size_t d = 0; d < p.logical.size(); ++d) {
    int64_t end = 0;
    if (p.offset[d] < 0 || __builtin_add_overflow(p.offset[d], p.shape[d], &end) || end > p.logical[d]) return false;
  }
  return true;
}

// Two blocks inside one tensor (their ends do not overflow) share an element.
bool overlap(const TensorPiece& a, const TensorPiece& b) {
  for (size_t d = 0; d < a.offset.size(); ++d)
    if (a.offset[d] + a.shape[d] <= b.offset[d] || b.offset[d] + b.shape[d] <= a.offset[d]) return false;
  return num_elements(a.shape) > 0 && num_elements(b.shape) > 0;
}

// The pieces of each tensor, which must tile it exactly: inside it, not
// overlapping, their elements adding up to its own; one shape and one
// dtype per tensor. `where` names what is checked in an error.
StatusOr<std::map<std::string, std::vector<const TensorPiece*>>> tile(const std::vector<const TensorPiece*>& pieces,
                                                                       const std::string& where, Code code) {
  std::map<std::string, std::vector<const TensorPiece*>> by_tensor;
  for (const TensorPiece* p : pieces) {
    if (p->tensor.empty()) return Status(code, fmt::format("{}: a piece names no tensor", where));
    if (!inside(*p))
      return Status(code, fmt::format("{}: a piece of {} at [{}] shaped {} lies outside its shape {}", where,
                                      p->tensor, fmt::join(p->offset, ", "), shape_string(p->shape),
                                      shape_string(p->logical)));
    auto& list = by_tensor[p->tensor];
    if (!list.empty() && (list[0]->logical != p->logical || list[0]->dtype != p->dtype))
      return Status(code, fmt::format("{}: the pieces of {} disagree on its shape or dtype", where, p->tensor));
    for (const TensorPiece* other : list)
      if (overlap(*other, *p))
        return Status(code, fmt::format("{}: two pieces of {} overlap (at [{}] and [{}])", where, p->tensor,
                                        fmt::join(other->offset, ", "), fmt::join(p->offset, ", ")));
    list.push_back(p);
  }
  for (const auto& [name, list] : by_tensor) {
    int64_t covered = 0;
    for (const TensorPiece* p : list) covered += num_elements(p->shape);
    if (covered != num_elements(list[0]->logical))
      return Status(code, fmt::format("{}: the pieces of {} cover {} of its {} elements", where, name, covered,
                                      num_elements(list[0]->logical)));
  }
  return by_tensor;
}

// A variable's optimizer state is "<variable>/<state>" where <variable> is
// itself a tensor of the step; anything else is a variable.
std::string state_of(const std::string& name, const std::map<std::string, std::vector<const TensorPiece*>>& tensors) {
  size_t slash = name.rfind('/');
  if (slash == std::string::npos || slash == 0 || !tensors.count(name.substr(0, slash))) return "";
  return name.substr(slash + 1);
}

// A file of the step folder, by a plain name.
bool plain_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string::npos;
}

// Writes `text` to <folder>/<name> under a temporary name, then renames it
// into place and syncs the folder: the file is whole or absent.
Status install_file(const fs::path& folder, const std::string& name,
                    const std::function<Status(const std::string&)>& write) {
  const std::string tmp = (folder / fmt::format(".{}.tmp-{}", name, ::getpid())).string();
  const std::string path = (folder / name).string();
  Status written = write(tmp);
  if (written.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    written = os_error(fmt::format("cannot rename {} to {}", tmp, path), errno);
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return written;
  }
  return sync_directory(folder.string());
}

}  // namespace

std::string node_file_name(int node, int nodes) {
  return nodes == 1 ? std::string(kModelFile) : fmt::format("node-{}.safetensors", node);
}

StatusOr<NodeFile> write_node_file(const std::string& dir, int64_t step, int node, int nodes,
                                   std::vector<TensorPiece> pieces, const FileAccess& access,
                                   const std::map<std::string, std::string>& metadata,
                                   const WriteObserver& observe) {
  if (dir.empty()) return invalid_argument("checkpoint: the directory is empty");
  if (step < 0) return invalid_argument("checkpoint: step is {}, must not be negative", step);
  for (const TensorPiece& p : pieces)
    if (!inside(p) || static_cast<int64_t>(p.values.size()) != num_elements(p.shape))
      return invalid_argument("checkpoint: the piece of {} at [{}] does not fit its shape {} ({} values)", p.tensor,
                              fmt::join(p.offset, ", "), shape_string(p.logical), p.values.size());
  if (nodes == 1) {
    // One node holds every piece: its file holds whole tensors.
    std::map<std::string, TensorPiece> joined;
    for (TensorPiece& p : pieces) {
      auto [it, fresh] = joined.try_emplace(p.tensor);
      TensorPiece& w = it->second;
      if (fresh) w = TensorPiece{p.tensor, p.logical, std::vector<int64_t>(p.logical.size(), 0), p.logical, p.dtype, {}};
      Shape shape;
      place_piece(p.logical, p.offset, p.shape, p.values, &shape, &w.values);
    }
    pieces.clear();
    for (auto& [name, p] : joined) pieces.push_back(std::move(p));
  }
  std::sort(pieces.begin(), pieces.end(), [](const TensorPiece& a, const TensorPiece& b) {
    return a.tensor != b.tensor ? a.tensor < b.tensor : a.offset < b.offset;
  });
  std::vector<CheckpointTensor> tensors;
  std::set<std::string> keys;
  for (TensorPiece& p : pieces) {
    if (!keys.insert(piece_key(p)).second) return invalid_argument("checkpoint: {} appears twice", piece_key(p));
    tensors.push_back(CheckpointTensor{piece_key(p), p.shape, std::move(p.values), p.dtype});
    p.values = {};
  }
  RILL_RETURN_IF_ERROR(prepare_root(dir, access));
  const fs::path folder = fs::path(dir) / checkpoint_step_name(step);
  std::error_code ec;
  fs::create_directory(folder, ec);
  if (ec) return fs_error("cannot create " + folder.string(), ec);
  // Made by this run's nodes, or by an earlier run of this user: never a
  // folder another user planted (the root is checked above).
  RILL_RETURN_IF_ERROR(check_own_folder(folder.string(), "checkpoint step folder"));
  NodeFile out{node, node_file_name(node, nodes), 0, std::move(pieces)};
  RILL_RETURN_IF_ERROR(install_file(folder, out.file, [&](const std::string& path) {
    return write_safetensors(path, tensors, metadata, observe);
  }));
  const auto bytes = fs::file_size(folder / out.file, ec);
  if (ec) return fs_error("cannot read the size of " + (folder / out.file).string(), ec);
  out.bytes = static_cast<int64_t>(bytes);
  return out;
}

Status write_step_meta(const std::string& dir, int64_t step, const std::string& job, const std::string& optimizer,
                       const std::vector<NodeFile>& files, int keep_last, const FileAccess& access) {
  if (keep_last < 1) return invalid_argument("checkpoint: keep_last is {}, must be at least 1", keep_last);
  std::vector<const TensorPiece*> all;
  for (const NodeFile& f : files) {
    if (!plain_name(f.file)) return invalid_argument("checkpoint: node {} reported '{}', not a file name", f.node, f.file);
    for (const TensorPiece& p : f.pieces) all.push_back(&p);
  }
  RILL_ASSIGN_OR_RETURN(auto tensors,
                        tile(all, fmt::format("checkpoint step {}", step), Code::kInvalidArgument));
  const bool single = files.size() == 1 && files[0].file == kModelFile &&
                      std::all_of(all.begin(), all.end(), [](const TensorPiece* p) { return whole(*p); });
  json listed = json::array();
  std::set<std::string> states;
  for (const auto& [name, list] : tensors) {
    const std::string state = state_of(name, tensors);
    if (!state.empty()) states.insert(state);
    // A compressed all-reduce's carried state (runtime/node/carried_state.h).
    const char* role = name.starts_with(kCarriedPrefix) ? "carried" : state.empty() ? "variable" : "optimizer_state";
    listed.push_back({{"name", name}, {"shape", list[0]->logical}, {"dtype", safetensors_dtype(list[0]->dtype)},
                      {"role", role}});
  }
  json opt = {{"states", states}};
  if (!optimizer.empty()) opt["name"] = optimizer;
  json meta = {{"format", single ? 1 : 2}, {"step", step},          {"job", job},
               {"data", {{"position", "step"}}}, {"optimizer", opt}, {"tensors", listed}};
  if (!single) {
    json file_list = json::array(), piece_list = json::array();
    for (const NodeFile& f : files) {
      file_list.push_back({{"file", f.file}, {"node", f.node}, {"bytes", f.bytes}});
      for (const TensorPiece& p : f.pieces)
        piece_list.push_back({{"tensor", p.tensor}, {"file", f.file}, {"key", piece_key(p)}, {"offset", p.offset},
                              {"shape", p.shape}});
    }
    meta["files"] = file_list;
    meta["pieces"] = piece_list;
  }
  std::string text;
  try {
    text = meta.dump(1) + "\n";
  } catch (const json::exception& e) {  // only invalid UTF-8 in a name or the job
    return invalid_argument("checkpoint: names and the job must be UTF-8: {}", e.what());
  }
  RILL_RETURN_IF_ERROR(prepare_root(dir, access));
  const fs::path root(dir), folder = root / checkpoint_step_name(step);
  RILL_RETURN_IF_ERROR(install_file(folder, kMetaFile, [&](const std::string& path) {
    return write_file_synced(path, {{text.data(), text.size()}});
  }));
  RILL_RETURN_IF_ERROR(sync_directory(root.string()));
  RILL_RETURN_IF_ERROR(write_latest(root, checkpoint_step_name(step)));
  return prune(root, step, keep_last);
}

Status drop_steps_after(const std::string& dir, int64_t step) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (bool complete : {true, false})
    for (const auto& [s, name] : list_step_dirs(dir, complete)) {
      if (s <= step) continue;
      const fs::path doomed = fs::path(dir) / fmt::format(".remove-{}-{}", name, ::getpid());
      if (::rename((fs::path(dir) / name).c_str(), doomed.c_str()) != 0)
        return os_error(fmt::format("cannot remove step {} of an earlier run from {}", s, dir), errno);
      fs::remove_all(doomed, ec);
      if (ec) return fs_error("cannot remove " + doomed.string(), ec);
    }
  return {};
}

StatusOr<Checkpoint> read_pieced_step(const fs::path& dir, const json& meta, const std::string& meta_path,
                                      const FileAccess& access) {
  auto bad = [&](const std::string& what) { return data_loss("{}: {}", meta_path, what); };
  Checkpoint checkpoint;
  const auto step = meta.find("step");
  const auto job = meta.find("job");
  if (step == meta.end() || !step->is_number_unsigned() || step->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return bad("\"step\" must be a non-negative integer");
  if (job == meta.end() || !job->is_string()) return bad("\"job\" must be a string");
  checkpoint.step = static_cast<int64_t>(step->get<uint64_t>());
  checkpoint.job = job->get<std::string>();
  if (auto opt = meta.find("optimizer"); opt != meta.end() && opt->is_object() && opt->contains("name") &&
                                         (*opt)["name"].is_string())
    checkpoint.metadata["optimizer"] = (*opt)["name"].get<std::string>();
  const auto tensors = meta.find("tensors"), files = meta.find("files"), pieces = meta.find("pieces");
  if (tensors == meta.end() || !tensors->is_array() || files == meta.end() || !files->is_array() ||
      pieces == meta.end() || !pieces->is_array())
    return bad("format 2 needs the arrays \"tensors\", \"files\" and \"pieces\"");
  // Every file of the step, read whole: its tensors by key.
  std::map<std::string, std::map<std::string, CheckpointTensor>> read;
  for (size_t i = 0; i < files->size(); ++i) {
    const json& f = (*files)[i];
    if (!f.is_object() || !f.contains("file") || !f["file"].is_string()) return bad(fmt::format("files[{}] needs a \"file\"", i));
    const std::string name = f["file"].get<std::string>();
    if (!plain_name(name))
      return bad(fmt::format("files[{}] names '{}', not a file of the step folder", i, name));
    Checkpoint part;
    RILL_RETURN_IF_ERROR(read_safetensors((dir / name).string(), &part, access));
    auto& keyed = read[name];
    for (CheckpointTensor& t : part.tensors) keyed[t.name] = std::move(t);
  }
  std::map<std::string, std::pair<Shape, DType>> declared;
  std::vector<std::string> order;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const json& t = (*tensors)[i];
    Shape shape;
    DType dtype = DType::kF32;
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("shape") ||
        !read_dims(t["shape"], &shape) || !t.contains("dtype") || !t["dtype"].is_string() ||
        !parse_safetensors_dtype(t["dtype"].get<std::string>(), &dtype))
      return bad(fmt::format("tensors[{}] needs a string \"name\", a \"shape\" and a \"dtype\"", i));
    const std::string name = t["name"].get<std::string>();
    if (elements_of(shape) < 0) return bad(fmt::format("tensors[{}] ({}) has a shape too large to hold", i, name));
    if (!declared.emplace(name, std::make_pair(shape, dtype)).second) return bad(fmt::format("{} is listed twice", name));
    order.push_back(name);
  }
  std::vector<TensorPiece> listed(pieces->size());
  std::vector<const CheckpointTensor*> stored(pieces->size());
  std::vector<const TensorPiece*> all;
  for (size_t i = 0; i < pieces->size(); ++i) {
    const json& p = (*pieces)[i];
    TensorPiece& piece = listed[i];
    if (!p.is_object() || !p.contains("tensor") || !p["tensor"].is_string() || !p.contains("file") ||
        !p["file"].is_string() || !p.contains("key") || !p["key"].is_string() || !p.contains("offset") ||
        !read_dims(p["offset"], &piece.offset) || !p.contains("shape") || !read_dims(p["shape"], &piece.shape))
      return bad(fmt::format("pieces[{}] needs \"tensor\", \"file\", \"key\", \"offset\" and \"shape\"", i));
    piece.tensor = p["tensor"].get<std::string>();
    const auto tensor = declared.find(piece.tensor);
    if (tensor == declared.end()) return bad(fmt::format("pieces[{}] is of {}, which \"tensors\" does not list", i, piece.tensor));
    std::tie(piece.logical, piece.dtype) = tensor->second;
    const auto file = read.find(p["file"].get<std::string>());
    if (file == read.end()) return bad(fmt::format("pieces[{}] lies in {}, which \"files\" does not list", i, p["file"].dump()));
    const auto held = file->second.find(p["key"].get<std::string>());
    if (held == file->second.end())
      return data_loss("{} holds no tensor {}, which {} lists", (dir / file->first).string(), p["key"].dump(), meta_path);
    if (held->second.shape != piece.shape || held->second.dtype != piece.dtype)
      return data_loss("{}: {} is {} {} there, {} lists {} {}", (dir / file->first).string(), p["key"].dump(),
                       safetensors_dtype(held->second.dtype), shape_string(held->second.shape), meta_path,
                       safetensors_dtype(piece.dtype), shape_string(piece.shape));
    stored[i] = &held->second;
    all.push_back(&piece);
  }
  RILL_ASSIGN_OR_RETURN(auto tiled, tile(all, meta_path, Code::kDataLoss));
  for (const std::string& name : order) {
    const auto& [shape, dtype] = declared[name];
    // Tiled by its pieces (whose values were read), or empty: only then
    // is its room allocated.
    if (num_elements(shape) > 0 && !tiled.count(name)) return bad(fmt::format("no piece holds {}", name));
    checkpoint.tensors.push_back(
        CheckpointTensor{name, shape, std::vector<float>(static_cast<size_t>(num_elements(shape))), dtype});
  }
  std::map<std::string, CheckpointTensor*> by_name;
  for (CheckpointTensor& t : checkpoint.tensors) by_name[t.name] = &t;
  for (size_t i = 0; i < listed.size(); ++i) {
    CheckpointTensor& t = *by_name.at(listed[i].tensor);
    copy_block(t.shape, listed[i].offset, listed[i].shape, t.values.data(),
               const_cast<float*>(stored[i]->values.data()), false);
  }
  return checkpoint;
}

}  // namespace rill
