// Datasets read from files, kept for the next reader of the same files: a
// job's phases (started again after a lost node or a change of members), a
// job after another on the same data, the master's count of a dataset's
// samples before its own node reads it, and the nodes of one process each
// read and decode a file once.
//
// A kept dataset is given only for an equal spec read under the same access
// rules, and only after each of its files was opened again under them (a
// file outside the roots, or a key file, is refused as on a first read, by
// the reader itself) and found unchanged since it was read: the same device,
// inode, size, and modification and status-change times. A file changed in
// the last second is read each time (it could change again within the file
// system's clock step), as are pipes (streams). Up to kKeptBytes stay kept,
// the least recently used let go first: an idle agent holds no more; a
// larger dataset is never kept. Readers of one spec under the same rules at
// once read it once: the later ones wait for the first's result (kept or
// not). Any thread may call it.
//
// The stamps are of the paths, before and after the read; the reader opens
// them again. A path swapped to another file and back within the read could
// leave that other file's content kept under the first one's stamps: it
// passed the same access rules, so whoever can swap the paths could as well
// have written the first file.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "base/file_access.h"
#include "base/status.h"
#include "kernels/data/dataset.h"
#include "kernels/data/dataset_spec.h"

namespace rill {

inline constexpr size_t kKeptBytes = size_t{512} << 20;

using DatasetReader = std::function<StatusOr<std::shared_ptr<const Dataset>>()>;

// The dataset `spec` describes: kept, or made by `read` (and kept when
// every file of it is a regular file). Specs with no files (synthetic,
// inline) are read each time.
StatusOr<std::shared_ptr<const Dataset>> open_kept(const DatasetSpec& spec, const FileAccess& access,
                                                   const DatasetReader& read);

// How many opens were answered without a read of their own (a kept
// dataset, or the read of another reader at the same time), in this
// process (tests).
int64_t kept_dataset_hits();

}  // namespace rill
