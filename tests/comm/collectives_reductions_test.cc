// The reductions (all_reduce, reduce_scatter, reduce): large tensors, kept scratch, every reduce op.
#include <algorithm>
#include <cmath>

#include "comm/collectives.h"
#include "tests/comm/collectives_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

TEST_CASE("all_reduce of a large tensor over zmq with the default chunk") {
  // Over TCP, and through shared-memory rings (12 MiB: three rings' worth,
  // so messages wrap around and are cut into several records).
  for (Kind kind : {Kind::kZmq, Kind::kShm}) {
    CAPTURE(kind_name(kind));
    const int world = 3;
    auto transports = make_world(kind, world);
    const size_t count = (size_t{3} << 20) + 7;  // 12 MiB, several 1 MiB chunks per block
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Collectives c(*transports[rank]);
      auto in = input(rank, count, 5);
      std::vector<float> out(count);
      RILL_RETURN_IF_ERROR(c.all_reduce(in, out, 1));
      return expect_equal(out, sum(world, count, 5), fmt::format("rank {}", rank));
    });
    check_all_ok(statuses);
  }
}

TEST_CASE("repeated all_reduce (ring and direct) and reduce_scatter keep their scratch and stay correct") {
  const int world = 3;
  auto transports = make_inproc_transports(world);
  auto statuses = run_ranks(world, [&](int rank) -> Status {
    Collectives ring(*transports[rank], CollectiveOptions{1000, std::chrono::milliseconds(10000), 0});
    Collectives direct(*transports[rank]);
    const size_t count = 4099;
    auto in = input(rank, count, 1);
    std::vector<float> out(count), block(block_range(count, world, rank).size), inplace;
    size_t ring_scratch = 0, direct_scratch = 0;
    for (int i = 0; i < 5; ++i) {
      RILL_RETURN_IF_ERROR(ring.all_reduce(in, out, 1));
      RILL_RETURN_IF_ERROR(expect_equal(out, sum(world, count, 1), "all_reduce"));
      RILL_RETURN_IF_ERROR(ring.reduce_scatter(in, block, 2));
      inplace = in;
      RILL_RETURN_IF_ERROR(direct.all_reduce(inplace, inplace, 3));
      RILL_RETURN_IF_ERROR(expect_equal(inplace, sum(world, count, 1), "direct all_reduce in place"));
      if (i == 0) ring_scratch = ring.scratch_bytes(), direct_scratch = direct.scratch_bytes();
      if (ring.scratch_bytes() != ring_scratch || direct.scratch_bytes() != direct_scratch) {
        return internal_error("scratch grew on call {}", i);
      }
    }
    return Status::ok_status();
  });
  check_all_ok(statuses);
}

// Each reduce op against a reference combined here. Inputs are small
// integers (-8..8), so sums and products of up to 3 of them are exact in
// float whatever the order, max and min are exact, and the average is the
// exact sum divided once by the world size, as the collectives do: every
// result compares with ==.
TEST_CASE("all_reduce, reduce_scatter and reduce with every reduce op, ring and direct, world 1 to 3") {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct, ReduceOp::kAverage};
  auto reference = [](ReduceOp op, int world, size_t count, int salt) {
    std::vector<float> want = input(0, count, salt);
    for (int r = 1; r < world; ++r)
      for (size_t i = 0; i < count; ++i) {
        const float v = value(r, i, salt);
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAverage: want[i] += v; break;
          case ReduceOp::kMax: want[i] = std::max(want[i], v); break;
          case ReduceOp::kMin: want[i] = std::min(want[i], v); break;
          case ReduceOp::kProduct: want[i] *= v; break;
        }
      }
    if (op == ReduceOp::kAverage)
      for (float& v : want) v /= static_cast<float>(world);
    return want;
  };
  for (int world : {1, 2, 3}) {
    CAPTURE(world);
    auto transports = make_inproc_transports(world);
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      for (size_t direct_bytes : {size_t{0}, size_t{1} << 20}) {
        Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(20000), direct_bytes});
        uint64_t tag = 1;
        for (size_t count : {size_t{1}, size_t{7}, size_t{3001}}) {
          for (ReduceOp op : ops) {
            const std::string at =
                fmt::format("{} count {} rank {} direct {}", reduce_op_name(op), count, rank, direct_bytes);
            const int salt = static_cast<int>(count) + static_cast<int>(op);
            const auto in = input(rank, count, salt);
            const auto want = reference(op, world, count, salt);
            std::vector<float> out(count, -1.0f);
            RILL_RETURN_IF_ERROR(c.all_reduce(in, out, tag++, op));
            RILL_RETURN_IF_ERROR(expect_equal(out, want, "all_reduce " + at));
            std::vector<float> inplace = in;
            RILL_RETURN_IF_ERROR(c.all_reduce(inplace, inplace, tag++, op));
            RILL_RETURN_IF_ERROR(expect_equal(inplace, want, "all_reduce in place " + at));
            const BlockRange own = block_range(count, world, rank);
            std::vector<float> block(own.size, -1.0f);
            RILL_RETURN_IF_ERROR(c.reduce_scatter(in, block, tag++, op));
            RILL_RETURN_IF_ERROR(expect_equal(
                block, std::vector<float>(want.begin() + own.begin, want.begin() + own.begin + own.size),
                "reduce_scatter " + at));
            std::vector<float> reduced(rank == world - 1 ? count : 0, -1.0f);
            RILL_RETURN_IF_ERROR(c.reduce(in, reduced, world - 1, tag++, op));
            if (rank == world - 1) RILL_RETURN_IF_ERROR(expect_equal(reduced, want, "reduce " + at));
          }
        }
        // Max and min carry a NaN from any rank to every rank.
        std::vector<float> nan_in(5, static_cast<float>(rank));
        if (rank == world - 1) nan_in[2] = std::nanf("");
        for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
          std::vector<float> out(5);
          RILL_RETURN_IF_ERROR(c.all_reduce(nan_in, out, tag++, op));
          if (!std::isnan(out[2]) || std::isnan(out[0]))
            return internal_error("{} of a NaN on rank {}: {} {}", reduce_op_name(op), world - 1, out[0], out[2]);
        }
      }
      return Status::ok_status();
    });
    check_all_ok(statuses);
  }
}
