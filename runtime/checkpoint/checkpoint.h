// The checkpoint store: a job's variables and optimizer state, saved to and
// loaded from disk in a format any safetensors reader understands.
//
// Layout under a checkpoint root (docs/CHECKPOINT_FORMAT.md has the details):
//   <root>/step-00000120/model.safetensors   every tensor (F32, I32, BF16 or F16), little-endian
//   <root>/step-00000120/meta.json           step, job, format, tensor list
//   <root>/latest                            "step-00000120\n"
// A step directory is built under a temporary name and renamed into place, so
// a step directory either is complete or does not exist; a crash mid-write
// leaves only a `.tmp-step-...` directory, which readers ignore.
//
// Free functions on the file system; no shared state. Two writers must not
// write into the same root at the same time (the master writes checkpoints);
// reading while a writer works is safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/file_access.h"
#include "base/status.h"
#include "kernels/tensor.h"

namespace rill {

// One tensor: a variable ("w1") or an optimizer state of one ("w1/momentum",
// "w1/adam_m", "w1/adam_v"). values holds num_elements(shape) elements,
// row-major, each as 4 bytes (an f32's value; an i32 variable's int, bit for
// bit); `dtype` is how they lie on disk (checkpoint_dtypes.h): F32 and I32
// as they are, BF16 and F16 rounded from f32 values (read back widened).
struct CheckpointTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
  DType dtype = DType::kF32;
};

struct Checkpoint {
  int64_t step = 0;  // steps completed; training resumes at this step
  std::string job;
  std::vector<CheckpointTensor> tensors;        // read back in the order written
  std::map<std::string, std::string> metadata;  // safetensors __metadata__, e.g. "optimizer": "adam"
};

// The name of a step directory: "step-00000120" (at least 8 digits).
std::string checkpoint_step_name(int64_t step);

// Writes <dir>/step-<step>/ atomically (creating <dir> if needed), then points
// <dir>/latest at it, then removes older step directories so that the new one
// and at most keep_last - 1 with smaller steps remain. Step directories with
// larger steps (from an abandoned run) are left alone; `latest` decides.
// Bad input (keep_last < 1, a negative step, duplicate or empty names,
// values that do not match a shape) is kInvalidArgument; a file-system
// failure names the path and the OS error.
// Files are made 0600 (the model is the job's owner's). The folder is checked
// at every write as it is opened: this user's (or, in a shared folder, not
// another's), and within `access` (an agent's checkpoint roots).
Status write_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep_last,
                        const FileAccess& access = {});

// Creates `dir` if needed and proves a file can be written there, so that an
// unwritable checkpoint directory is an error before the first step, not
// after the last.
Status check_checkpoint_dir(const std::string& dir, const FileAccess& access = {});

// The complete step directories under `root`, by step (none if it is absent).
std::vector<int64_t> checkpoint_steps(const std::string& root);

// Before a run writes into `dir`: steps a run before it left there are an
// error naming them (mixing two runs' steps would resume the wrong one),
// unless the run resumes from them (`resume` is "latest" or a path inside
// `dir`; empty: no resume) or `overwrite`, which removes them and `latest`.
Status claim_checkpoint_dir(const std::string& dir, const std::string& resume, bool overwrite);

// `path` is a step directory, or a checkpoint root, whose latest step is read.
// Everything read is validated: a corrupt or inconsistent file is kDataLoss
// naming the file and the problem; a missing checkpoint is kNotFound.
// Each file is checked as it is opened against `access` (an agent's
// checkpoint roots; a key file is never read).
StatusOr<Checkpoint> read_checkpoint(const std::string& path, const FileAccess& access = {});

// The newest complete step directory under `root`: the one `latest` names, or,
// when `latest` is missing or names no complete directory, the complete step
// directory with the largest step. kNotFound when there is none.
StatusOr<std::string> latest_checkpoint(const std::string& root, const FileAccess& access = {});

}  // namespace rill
