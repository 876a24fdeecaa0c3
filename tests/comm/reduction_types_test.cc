// Reductions of elements other than f32 (comm/collectives.h): i32 with
// every op on the direct exchange and on the ring, reduce_scatter_v and
// reduce, sums and products wrapping around as two's complement, and the
// average refused; bf16 and f16 likewise, combining in float. Exact
// integers (and 16-bit floats holding small integers): results compare
// with ==.
#include <climits>
#include <cstdint>
#include <vector>

#include "base/half.h"
#include "comm/collectives.h"
#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

// Rank r's element i.
int32_t value(int r, size_t i) { return static_cast<int32_t>((i * 7 + 3) % 11) - 5 + r * 3; }

int32_t wrapped(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

int32_t expected(ReduceOp op, size_t i, int world) {
  int64_t sum = 0, product = 1;
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  for (int r = 0; r < world; ++r) {
    const int32_t v = value(r, i);
    sum += v;
    product = static_cast<int64_t>(wrapped(product * v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  switch (op) {
    case ReduceOp::kSum: return wrapped(sum);
    case ReduceOp::kProduct: return wrapped(product);
    case ReduceOp::kMax: return hi;
    case ReduceOp::kMin: return lo;
    case ReduceOp::kAverage: break;
  }
  return 0;
}

}  // namespace

TEST_CASE("i32 all_reduce, reduce_scatter_v and reduce: every op, direct and ring, exact") {
  constexpr int kWorld = 3;
  // 40 elements take the direct exchange, 50,000 (200 KB) the ring in chunks.
  for (size_t count : {size_t{40}, size_t{50000}}) {
    CAPTURE(count);
    auto transports = make_inproc_transports(kWorld);
    auto statuses = run_ranks(kWorld, [&](int rank) -> Status {
      CollectiveOptions options;
      options.chunk_bytes = 16384;
      Collectives c(*transports[rank], options);
      std::vector<int32_t> in(count), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
      uint64_t tag = 1;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
        RILL_RETURN_IF_ERROR(c.all_reduce(in, out, tag++, op));
        for (size_t i = 0; i < count; ++i)
          if (out[i] != expected(op, i, kWorld))
            return internal_error("all_reduce {} element {}: {} not {}", reduce_op_name(op), i, out[i],
                                  expected(op, i, kWorld));
      }
      // Blocks of 1, count - 3 and 2 elements.
      const std::vector<size_t> counts = {1, count - 3, 2};
      size_t begin = 0;
      for (int r = 0; r < rank; ++r) begin += counts[r];
      std::vector<int32_t> block(counts[rank]);
      RILL_RETURN_IF_ERROR(c.reduce_scatter_v(in, block, counts, tag++));
      for (size_t i = 0; i < block.size(); ++i)
        if (block[i] != expected(ReduceOp::kSum, begin + i, kWorld))
          return internal_error("reduce_scatter_v element {}", begin + i);
      std::vector<int32_t> at_root(count);
      RILL_RETURN_IF_ERROR(c.reduce(in, at_root, 1, tag++, ReduceOp::kMax));
      if (rank == 1)
        for (size_t i = 0; i < count; ++i)
          if (at_root[i] != expected(ReduceOp::kMax, i, kWorld)) return internal_error("reduce element {}", i);
      return Status::ok_status();
    });
    check_all_ok(statuses);
  }
}

TEST_CASE("i32 sums wrap around as two's complement; an i32 average is refused") {
  auto transports = make_inproc_transports(2);
  auto statuses = run_ranks(2, [&](int rank) -> Status {
    Collectives c(*transports[rank]);
    std::vector<int32_t> in = {rank == 0 ? INT32_MAX : 1, INT32_MIN, 7}, out(3);
    RILL_RETURN_IF_ERROR(c.all_reduce(in, out, 1));
    if (out != std::vector<int32_t>{INT32_MIN, 0, 14}) return internal_error("wrapped sums {} {} {}", out[0], out[1], out[2]);
    Status average = c.all_reduce(in, out, 2, ReduceOp::kAverage);
    if (average.code() != Code::kInvalidArgument ||
        average.message().find("the average of i32 values is not an i32") == std::string::npos)
      return internal_error("an i32 average was not refused: {}", average.to_string());
    return Status::ok_status();
  });
  check_all_ok(statuses);
}

// Small integers, their sums and maxima (|v| < 256) are exact in bf16 and
// f16, so the ring's and the direct exchange's results equal the exact ones
// whatever the order; the average of 4 ranks divides by a power of two:
// exact too.
template <typename H>
void check_half_reductions() {
  constexpr int kWorld = 4;
  auto v = [](int r, size_t i) { return static_cast<float>(static_cast<int>((i * 5 + 1) % 13) - 6 + r * 2); };
  for (size_t count : {size_t{40}, size_t{50000}}) {
    CAPTURE(count);
    auto transports = make_inproc_transports(kWorld);
    auto statuses = run_ranks(kWorld, [&](int rank) -> Status {
      CollectiveOptions options;
      options.chunk_bytes = 16384;
      Collectives c(*transports[rank], options);
      std::vector<H> in(count), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = H::from_float(v(rank, i));
      uint64_t tag = 1;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAverage}) {
        RILL_RETURN_IF_ERROR(c.all_reduce(in, out, tag++, op));
        for (size_t i = 0; i < count; ++i) {
          float sum = 0, hi = -1e9f;
          for (int r = 0; r < kWorld; ++r) {
            sum += v(r, i);
            hi = std::max(hi, v(r, i));
          }
          const float want = op == ReduceOp::kSum ? sum : op == ReduceOp::kMax ? hi : sum / kWorld;
          if (out[i].to_float() != want)
            return internal_error("all_reduce {} element {}: {} not {}", reduce_op_name(op), i, out[i].to_float(), want);
        }
      }
      const std::vector<size_t> counts = {1, count - 4, 2, 1};
      size_t begin = 0;
      for (int r = 0; r < rank; ++r) begin += counts[r];
      std::vector<H> block(counts[rank]);
      RILL_RETURN_IF_ERROR(c.reduce_scatter_v(in, block, counts, tag++));
      for (size_t i = 0; i < block.size(); ++i) {
        float sum = 0;
        for (int r = 0; r < kWorld; ++r) sum += v(r, begin + i);
        if (block[i].to_float() != sum) return internal_error("reduce_scatter_v element {}", begin + i);
      }
      return Status::ok_status();
    });
    check_all_ok(statuses);
  }
}

TEST_CASE("bf16 and f16 all_reduce and reduce_scatter_v: sum, max and average, direct and ring, exact") {
  check_half_reductions<BFloat16>();
  check_half_reductions<Float16>();
}
