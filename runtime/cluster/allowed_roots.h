// Where a submitted job may make an agent read and write: its datasets'
// files must lie under the agent's data roots, its checkpoint folder (written,
// and read to resume) under its checkpoint roots. Paths are compared after
// symbolic links are resolved, so a link inside a root that points outside it
// is outside. The master checks a job when it is submitted; every other node
// checks its own roots when it builds its part (its roots may differ).
//
// Defaults (an agent without --data-root / --checkpoint-root): data under
// the agent's working folder, /usr/share (Debian's datasets) and /tmp;
// checkpoints under the working folder and /tmp (the working folder only if
// it is not /).
//
// No root given holds a key file the agent holds (base/file_access.h): one
// that does is refused; the working folder is left out of the defaults
// where it holds one; and a read of a key file as data is refused by its
// identity anyway.
//
// check_job_paths is the early, friendly check, on paths at submit; what
// is authoritative is the check of each file as it is opened (data_access()
// for dataset readers, checkpoint_access() for checkpoints), so a link put
// in place between the two is caught.
#pragma once

#include <string>
#include <vector>

#include "base/file_access.h"
#include "base/status.h"
#include "graph/job.h"

namespace rill {

struct AllowedRoots {
  std::vector<std::string> data;        // absolute, links resolved
  std::vector<std::string> checkpoint;  // absolute, links resolved

  // The roots given (relative ones against the working folder), or the
  // defaults where a list is empty. A root that does not exist is an error.
  static StatusOr<AllowedRoots> make(const std::vector<std::string>& data_roots,
                                     const std::vector<std::string>& checkpoint_roots);

  FileAccess data_access() const { return {true, data, "--data-root"}; }
  FileAccess checkpoint_access() const { return {true, checkpoint, "--checkpoint-root"}; }
};

// True when `path` (relative: against the working folder) is `root` or
// inside it, links resolved.
bool path_under(const std::string& path, const std::string& root);

// Every dataset file of `job` under a data root; with `checkpoints` (the
// master, which writes them and reads them to resume, and samples text
// after training) its checkpoint.dir and `resume` (a folder, or "latest":
// the checkpoint folder's) under a checkpoint root, and GPT-2's vocabulary
// folder (generate.vocab) under a data root. The error (kPermissionDenied) names `where` (the node),
// the field, the path and the roots.
Status check_job_paths(const graph::Job& job, const std::string& resume, const AllowedRoots& roots,
                       const std::string& where, bool checkpoints = true);

}  // namespace rill
