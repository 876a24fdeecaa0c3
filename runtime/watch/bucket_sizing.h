// Gradient buckets sized by the link (train.buckets_by_link): DDP's
// bucket_cap_mb, chosen from what the running job measures instead of
// fixed. The master decides once, from each node's link rate
// (runtime/watch/link_pace.h) and device time per step
// (runtime/watch/pace.h); a new size is taken at a step boundary, the plan
// compiled again and the run going on from every node's memory
// (master_attempts.cc).
//
// The model. A bucket's all-reduce costs a fixed kCallSeconds (its
// messages' round trips, packing, the comm thread's wake-up) plus its bytes
// over the link. The backward makes the step's S gradient bytes in T_b (two
// thirds of the device time per step: a backward costs twice the forward),
// and each bucket crosses as soon as it is full. The all-reduce of a step
// moves 2 (N - 1) / N x S per node (a ring), taking C at the slowest node's
// rate.
// - C below T_b (the link keeps up with the backward): the link idles
//   anyway, and smaller buckets only add calls, whose CPU the backward
//   needs (1 MiB buckets ran 0.95x one bucket unshaped on 2 cores,
//   docs/NETWORK.md): the size is kept.
// - C above T_b (the link is the bottleneck): the last byte arrives
//   s T_b / S + (S / s) kCallSeconds + C after the backward starts (the
//   first bucket made, the calls, the bytes), least at
//   s = S sqrt(kCallSeconds / T_b); rounded down to a power of two, at
//   least kMinBucketBytes. Taken when it is at most half the current size.
#pragma once

#include <cstdint>
#include <string>

namespace rill {

struct BucketSizing {
  int nodes = 2;                   // that all-reduce the gradients
  int64_t gradient_bytes = 0;      // a step's, all-reduced across nodes (S)
  int64_t current_bytes = 0;       // the plan's bucket size now (train.bucket_bytes)
  double link_mb_per_s = 0;        // the slowest node's fastest link, while busy
  double device_ms_per_step = 0;   // the slowest node's
};

struct BucketChoice {
  bool resize = false;
  int64_t bytes = 0;        // the size to run with (current_bytes when kept)
  double comm_ms = 0;       // C
  double backward_ms = 0;   // T_b
  std::string reason;       // one clause: why this size ("the all-reduce (23 ms) outlasts the backward (12 ms)")
};

inline constexpr double kCallSeconds = 0.5e-3;
inline constexpr int64_t kMinBucketBytes = int64_t{256} << 10;

BucketChoice choose_bucket_bytes(const BucketSizing& in);

// "1 MiB", "25 MiB", "256 KiB".
std::string format_bucket_bytes(int64_t bytes);

}  // namespace rill
