// Buckets sized by the link (runtime/watch/bucket_sizing.h): the size is
// kept while the all-reduce fits in the backward, and otherwise is the
// power of two at or below S sqrt(kCallSeconds / T_b), at least 256 KiB,
// taken only when it is at most half the current size.
#include <doctest/doctest.h>

#include <cmath>

#include "runtime/watch/bucket_sizing.h"

using namespace rill;

namespace {

// The MLP of bench/mlp_synthetic.json on 2 nodes: 2.7 MB of gradients a
// step, 25 MiB buckets, 13.5 ms of device time (a backward of 9 ms).
BucketSizing mlp(double link_mb_per_s) {
  BucketSizing in;
  in.nodes = 2;
  in.gradient_bytes = 2'700'000;
  in.current_bytes = int64_t{25} << 20;
  in.link_mb_per_s = link_mb_per_s;
  in.device_ms_per_step = 13.5;
  return in;
}

}  // namespace

TEST_CASE("a link that keeps up with the backward keeps the size") {
  const BucketChoice unshaped = choose_bucket_bytes(mlp(1200));  // 2.25 ms of all-reduce against 9 ms
  CHECK_FALSE(unshaped.resize);
  CHECK(unshaped.bytes == int64_t{25} << 20);
  CHECK(unshaped.comm_ms == doctest::Approx(2.25));
  CHECK(unshaped.backward_ms == doctest::Approx(9.0));
  CHECK(unshaped.reason.find("fits in the backward") != std::string::npos);
}

TEST_CASE("a link slower than the backward takes S sqrt(call / backward), as a power of two") {
  // 1 Gbit/s: 2.7 MB in 21.6 ms against 9 ms of backward; 2.7 MB x
  // sqrt(0.5 / 9) = 636 kB, so 512 KiB.
  const BucketChoice gigabit = choose_bucket_bytes(mlp(125));
  CHECK(gigabit.resize);
  CHECK(gigabit.bytes == 512 << 10);
  CHECK(gigabit.comm_ms == doctest::Approx(21.6));
  CHECK(gigabit.reason.find("outlasts the backward") != std::string::npos);
  // The rate changes C, not the best size: 100 Mbit/s gives the same.
  CHECK(choose_bucket_bytes(mlp(12.5)).bytes == 512 << 10);
  // A longer backward makes smaller buckets pay: 2.7 MB x sqrt(0.5 / 90),
  // 201 kB, is under the floor of 256 KiB.
  BucketSizing slow_compute = mlp(12.5);
  slow_compute.device_ms_per_step = 135;
  CHECK(choose_bucket_bytes(slow_compute).bytes == kMinBucketBytes);
  // A ring of 4 moves 1.5 x S per node: C grows, the size does not.
  BucketSizing four = mlp(125);
  four.nodes = 4;
  CHECK(choose_bucket_bytes(four).comm_ms == doctest::Approx(32.4));
  CHECK(choose_bucket_bytes(four).bytes == 512 << 10);
}

TEST_CASE("a size that is not at most half the current one, or nothing measured, keeps it") {
  BucketSizing near = mlp(125);
  near.current_bytes = 1 << 20;  // 512 KiB is half: taken
  CHECK(choose_bucket_bytes(near).resize);
  near.current_bytes = (1 << 20) - 1;  // under 1 MiB: 512 KiB is more than half
  const BucketChoice kept = choose_bucket_bytes(near);
  CHECK_FALSE(kept.resize);
  CHECK(kept.bytes == (1 << 20) - 1);
  CHECK(kept.reason.find("would differ little") != std::string::npos);
  BucketSizing unknown = mlp(0);
  CHECK_FALSE(choose_bucket_bytes(unknown).resize);
  CHECK(choose_bucket_bytes(unknown).reason == "nothing measured");
  unknown = mlp(125);
  unknown.device_ms_per_step = 0;
  CHECK_FALSE(choose_bucket_bytes(unknown).resize);
}

TEST_CASE("sizes are named in binary units") {
  CHECK(format_bucket_bytes(int64_t{25} << 20) == "25 MiB");
  CHECK(format_bucket_bytes(256 << 10) == "256 KiB");
  CHECK(format_bucket_bytes(1000) == "1000 bytes");
}
