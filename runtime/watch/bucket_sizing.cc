#include "runtime/watch/bucket_sizing.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

namespace rill {

BucketChoice choose_bucket_bytes(const BucketSizing& in) {
  BucketChoice out;
  out.bytes = in.current_bytes;
  const double s = static_cast<double>(in.gradient_bytes);
  const int n = std::max(2, in.nodes);
  out.backward_ms = in.device_ms_per_step * 2.0 / 3.0;
  out.comm_ms = in.link_mb_per_s > 0 ? 2.0 * (n - 1) / n * s / (in.link_mb_per_s * 1e6) * 1e3 : 0.0;
  if (in.link_mb_per_s <= 0 || in.device_ms_per_step <= 0 || in.gradient_bytes <= 0) {
    out.reason = "nothing measured";
    return out;
  }
  if (out.comm_ms <= out.backward_ms) {
    out.reason = fmt::format("the all-reduce ({:.1f} ms a step) fits in the backward ({:.1f} ms)", out.comm_ms,
                             out.backward_ms);
    return out;
  }
  const double best = s * std::sqrt(kCallSeconds / (out.backward_ms * 1e-3));
  int64_t bytes = std::max<int64_t>(kMinBucketBytes, static_cast<int64_t>(best));
  bytes = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(bytes)));
  const std::string why = fmt::format("the all-reduce ({:.1f} ms a step) outlasts the backward ({:.1f} ms)",
                                      out.comm_ms, out.backward_ms);
  if (in.current_bytes <= 0 || bytes * 2 > in.current_bytes) {
    out.reason = why + fmt::format(", and {} buckets would differ little", format_bucket_bytes(bytes));
    return out;
  }
  out.resize = true;
  out.bytes = bytes;
  out.reason = why;
  return out;
}

std::string format_bucket_bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

}  // namespace rill
