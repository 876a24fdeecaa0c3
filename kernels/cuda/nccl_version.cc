#include "kernels/cuda/nccl_version.h"

#include <fmt/format.h>

namespace rill {

std::string nccl_version_name(int code) {
  if (code <= 0) return fmt::format("an unknown version ({})", code);
  // Codes below 2.9's 20900 are NCCL's older encoding (2.8.3 is 2803).
  const int major = code < 20900 ? code / 1000 : code / 10000;
  const int minor = code < 20900 ? code % 1000 / 100 : code % 10000 / 100;
  return fmt::format("{}.{}.{}", major, minor, code % 100);
}

Status nccl_version_usable(int found, int built) {
  if (found >= kOldestNccl) return {};
  return Status(Code::kUnavailable,
                fmt::format("NCCL: this machine's libnccl is {}, and Rill needs {} or newer (its CUDA module was "
                            "built against {})",
                            nccl_version_name(found), nccl_version_name(kOldestNccl), nccl_version_name(built)));
}

}  // namespace rill
