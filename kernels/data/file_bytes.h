// Whole-file reading for the dataset readers. A file whose first bytes are the
// gzip magic (1f 8b) is inflated, whatever its name; any other file is returned
// as is. Stateless: any thread may call it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/file_access.h"
#include "base/status.h"

namespace rill {

struct ReadOptions {
  // Also read a pipe or FIFO (a shell's <(zcat ...), say) to its end. Off,
  // such a path is refused: a job file or checkpoint is a file.
  bool pipes = false;
  // How long a pipe may stay silent (its writer not yet started, or stalled)
  // before reading it is an error.
  int pipe_idle_seconds = 120;
  // Where a job's reads may go (an agent's data roots), checked on the
  // opened descriptor (base/file_access.h); null: anywhere. A file this
  // process holds as a key is refused either way.
  const FileAccess* access = nullptr;
};

// The (decompressed) contents of `path`. Errors name the file, never its
// content: missing, unreadable, a directory or device, a silent pipe, a key
// file, outside options.access, a corrupt or truncated gzip stream.
StatusOr<std::vector<uint8_t>> read_file_bytes(const std::string& path, const ReadOptions& options = {});

// Inflates a gzip stream (one or more members); `path` only names it in errors.
StatusOr<std::vector<uint8_t>> gunzip_bytes(std::span<const uint8_t> compressed, const std::string& path);

}  // namespace rill
