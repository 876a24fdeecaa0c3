// Which NCCL the CUDA module can use. The module is built against one NCCL
// header and runs with whatever libnccl.so.2 the machine has: nothing in
// the loader's dlopen checks that the two agree, so the module asks NCCL
// for its version (ncclGetVersion) before the first communicator and
// refuses, by name, a library older than the calls it makes.
//
// The one type both sides lay out is ncclConfig_t. From NCCL 2.14 on, the
// library copies min(config.size, its own size) bytes of it and resets the
// fields the config's `version` predates (init.cc, parseCommConfig), so a
// config from a newer header reaches an older 2.14+ library safely, and the
// other way round. 2.28.3 and 2.28.9 declare the same struct
// (ncclConfig_v22800).
#pragma once

#include <string>

#include "base/status.h"

namespace rill {

// NCCL 2.14.0: ncclCommInitRankConfig with `blocking` (non-blocking
// communicators), ncclGetLastError (2.13), ncclAvg and ncclBfloat16 (2.10).
inline constexpr int kOldestNccl = 21400;

// A version code as NCCL_VERSION makes it: major * 1000 + minor * 100 +
// patch up to 2.8, major * 10000 + minor * 100 + patch from 2.9 on.
std::string nccl_version_name(int code);

// OK when a library of version `found` serves a module built against
// `built`; else why not, naming both.
Status nccl_version_usable(int found, int built);

}  // namespace rill
