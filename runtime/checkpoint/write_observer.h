// WriteObserver: told a file's bytes written so far and its size, as the
// write goes on (checkpoint_io.h writes, write_progress.h counts).
#pragma once

#include <cstdint>
#include <functional>

namespace rill {

using WriteObserver = std::function<void(uint64_t done, uint64_t total)>;

}  // namespace rill
