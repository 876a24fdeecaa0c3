// llm.c's token files (what a "tokens" dataset reads,
// kernels/data/token_dataset.cc): a header of 256 int32 (the magic
// 20240520, the version, the token count), then the ids: version 1 as
// uint16, version 2 as uint32 (written when an id is past 65,535).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace rill {

// The ids in a token file's bytes; `where` names it in errors.
StatusOr<std::vector<int32_t>> parse_token_file(std::span<const uint8_t> bytes, const std::string& where);
// Writes `ids` to `path` (replaced whole: written beside it, then renamed).
Status write_token_file(const std::string& path, std::span<const int32_t> ids);
// The ids of a token file.
StatusOr<std::vector<int32_t>> read_token_file(const std::string& path);

}  // namespace rill
