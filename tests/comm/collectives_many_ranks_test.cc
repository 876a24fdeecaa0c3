// A small all-reduce among many ranks: recursive doubling (comm/
// collectives.cc) past kCollectiveDirectMaxRanks, powers of two and not,
// every reduce op, in place and not, with the scratch base/
// collective_scratch.h promises; every rank gets the same bits.
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "base/collective_scratch.h"
#include "comm/collectives.h"
#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

// Rank r's element i: small integers, so sums, maxima and minima are exact
// in f32 whatever the order; a product of i32 wraps the same in any order.
float value(int rank, size_t i) { return static_cast<float>(static_cast<int>((rank * 7 + i * 3) % 11) - 5); }

}  // namespace

TEST_CASE("recursive doubling: every op and world 9 to 17 gives the exact result, with the promised scratch") {
  for (int world : {9, 12, 16, 17}) {
    auto transports = make_inproc_transports(world);
    const size_t count = 37;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAverage}) {
      for (bool in_place : {true, false}) {
        CAPTURE(world);
        CAPTURE(reduce_op_name(op));
        CAPTURE(in_place);
        auto statuses = run_ranks(world, [&](int rank) -> Status {
          Collectives c(*transports[rank]);
          std::vector<std::byte> scratch(
              collective_scratch_bytes(CollectiveCall::kAllReduce, count * sizeof(float), in_place, world));
          c.use_scratch(scratch);
          std::vector<float> in(count), out(count);
          for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
          if (in_place) {
            RILL_RETURN_IF_ERROR(c.all_reduce(in, in, 5, op));
            out = in;
          } else {
            RILL_RETURN_IF_ERROR(c.all_reduce(in, out, 5, op));
          }
          if (std::string(c.last_algorithm()) != "recursive doubling")
            return internal_error("rank {}: {}", rank, c.last_algorithm());
          for (size_t i = 0; i < count; ++i) {
            float want = value(0, i);
            for (int q = 1; q < world; ++q) {
              const float v = value(q, i);
              want = op == ReduceOp::kMax ? std::max(want, v) : op == ReduceOp::kMin ? std::min(want, v) : want + v;
            }
            if (op == ReduceOp::kAverage) want /= static_cast<float>(world);
            // Integer sums below 2^24 are exact in any order; the average's
            // one division rounds the same exact sum the same way.
            if (out[i] != want) return internal_error("rank {} element {}: {} where {} is due", rank, i, out[i], want);
          }
          return Status::ok_status();
        });
        check_all_ok(statuses);
      }
    }
    // i32 products wrap around the same in any order.
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Collectives c(*transports[rank]);
      std::vector<int32_t> x(count);
      for (size_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>(rank * 977 + i * 13 + 3);
      RILL_RETURN_IF_ERROR(c.all_reduce(x, x, 6, ReduceOp::kProduct));
      for (size_t i = 0; i < count; ++i) {
        uint32_t want = 1;
        for (int q = 0; q < world; ++q) want *= static_cast<uint32_t>(q * 977 + i * 13 + 3);
        if (static_cast<uint32_t>(x[i]) != want) return internal_error("rank {} element {}: product differs", rank, i);
      }
      return Status::ok_status();
    });
    check_all_ok(statuses);
  }
}

TEST_CASE("recursive doubling: rounded sums are the same bits on every rank, over TCP too") {
  for (Kind kind : {Kind::kInproc, Kind::kZmq}) {
    const int world = 11;
    auto transports = make_world(kind, world);
    const size_t count = 1000;
    std::vector<std::vector<float>> outs(static_cast<size_t>(world));
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Collectives c(*transports[rank]);
      std::vector<float> x(count);
      // Values whose sum rounds: the order of additions shows in the bits.
      for (size_t i = 0; i < count; ++i) x[i] = 1.0f / static_cast<float>(rank * 31 + i + 1) + 1e-3f * static_cast<float>(rank);
      RILL_RETURN_IF_ERROR(c.all_reduce(x, x, 7));
      if (std::string(c.last_algorithm()) != "recursive doubling") return internal_error("{}", c.last_algorithm());
      outs[static_cast<size_t>(rank)] = std::move(x);
      return Status::ok_status();
    });
    check_all_ok(statuses);
    for (int rank = 1; rank < world; ++rank) {
      CAPTURE(rank);
      CHECK(std::memcmp(outs[static_cast<size_t>(rank)].data(), outs[0].data(), count * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("up to kCollectiveDirectMaxRanks a small all-reduce stays direct; past direct_bytes it is the ring") {
  for (int world : {kCollectiveDirectMaxRanks, kCollectiveDirectMaxRanks + 1}) {
    auto transports = make_inproc_transports(world);
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(20000), 1024});
      std::vector<float> small(256, 1.0f), large(257, 1.0f);  // 1024 bytes, then 1028
      RILL_RETURN_IF_ERROR(c.all_reduce(small, small, 1));
      const std::string want = world > kCollectiveDirectMaxRanks ? "recursive doubling" : "direct";
      if (c.last_algorithm() != want) return internal_error("world {}: {}", world, c.last_algorithm());
      if (small[0] != static_cast<float>(world)) return internal_error("sum {}", small[0]);
      RILL_RETURN_IF_ERROR(c.all_reduce(large, large, 2));
      if (std::string(c.last_algorithm()) != "ring") return internal_error("world {}: {}", world, c.last_algorithm());
      return Status::ok_status();
    });
    check_all_ok(statuses);
  }
}
