// Checkpoints every node writes itself (docs/CHECKPOINT_FORMAT.md, format 2):
// each node writes the pieces it holds into a file of its own in the step
// folder, and the master, once every node has said its file is written,
// writes meta.json (last): which file holds which piece of which tensor. A
// step whose meta.json is absent is not a checkpoint, whatever files lie in
// its folder, so a node lost while writing leaves the step absent, never
// torn. A job on one node writes one file of whole tensors, model.safetensors,
// with the meta.json of format 1: the same files as write_checkpoint.
//
// Free functions on the file system, as checkpoint.h; read_checkpoint reads
// both formats.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file_access.h"
#include "base/status.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/write_observer.h"

namespace rill {

// A block of a logical tensor (a variable or one of its optimizer states).
struct TensorPiece {
  std::string tensor;            // "w1", "w1/adam_m"
  Shape logical;
  std::vector<int64_t> offset;   // of the block in the logical tensor
  Shape shape;                   // of the block
  DType dtype = DType::kF32;     // as stored (checkpoint.dtype for a variable)
  std::vector<float> values;     // in memory (empty once written)
  bool optimizer_state = false;  // a variable's optimizer state ("w1/adam_m"), not a variable
};

// What a node wrote for one step: its file in the step folder and the
// pieces in it.
struct NodeFile {
  int node = 0;
  std::string file;
  int64_t bytes = 0;
  std::vector<TensorPiece> pieces;  // values empty
};

// The file node `node` of `nodes` writes: "node-<n>.safetensors", or with
// one node "model.safetensors".
std::string node_file_name(int node, int nodes);

// Writes `pieces` into <dir>/step-<step>/<node_file_name> (the folder made if
// needed; the file written under a temporary name, fsynced, renamed), with
// `metadata` as its __metadata__ ("optimizer": the job's). With one node
// every tensor's pieces are joined into the whole tensor first.
// Bad input (pieces that do not fit their tensor, a tensor named twice) is
// kInvalidArgument; a file-system failure names the path. `observe` hears
// the file's bytes as they are written.
StatusOr<NodeFile> write_node_file(const std::string& dir, int64_t step, int node, int nodes,
                                   std::vector<TensorPiece> pieces, const FileAccess& access = {},
                                   const std::map<std::string, std::string>& metadata = {},
                                   const WriteObserver& observe = {});

// Makes step `step` complete: writes its meta.json from every node's file
// (format 1 for a single file of whole tensors, else 2), then points
// `latest` at it and prunes as write_checkpoint does. The pieces must cover
// every tensor exactly once (kInvalidArgument naming the tensor otherwise).
Status write_step_meta(const std::string& dir, int64_t step, const std::string& job, const std::string& optimizer,
                       const std::vector<NodeFile>& files, int keep_last, const FileAccess& access = {});

// Removes the step folders after `step` (complete or not): what an earlier
// run left there, which a run going on from `step` writes again.
Status drop_steps_after(const std::string& dir, int64_t step);

// read_checkpoint's reader of a format 2 step folder whose meta.json is
// `meta` (read from `meta_path`).
StatusOr<Checkpoint> read_pieced_step(const std::filesystem::path& dir, const nlohmann::json& meta,
                                      const std::string& meta_path, const FileAccess& access);

}  // namespace rill
