// The all-reduce within each machine first (CollectiveOptions::machines,
// comm/collective_tiers.cc): the sum on every rank, the same bits on all,
// for every layout of ranks on machines it takes; the flat ring where the
// machines hold different numbers of ranks; fewer bytes across machines.
// Inputs are small integers, so every order of the sums gives the exact
// result in f32, i32 and bf16 (sums of at most 6 values of -8..8 are
// integers below 2^8, exact in bf16's 8 bits of mantissa).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "base/half.h"
#include "comm/collectives.h"
#include "comm/counting_transport.h"
#include "tests/comm/collectives_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

// Every rank's all_reduce of `count` elements with `machines`: its result,
// and the algorithm it says it used.
struct Ran {
  std::vector<std::vector<float>> out;
  std::vector<std::string> algorithm;
};
Ran all_reduce_on(const std::vector<int>& machines, size_t count, ReduceOp op) {
  const int world = static_cast<int>(machines.size());
  auto transports = make_inproc_transports(world);
  Ran ran{std::vector<std::vector<float>>(static_cast<size_t>(world)),
          std::vector<std::string>(static_cast<size_t>(world))};
  auto statuses = run_ranks(world, [&](int rank) -> Status {
    CollectiveOptions options;
    options.chunk_bytes = 4096;
    options.machines = machines;
    Collectives c(*transports[static_cast<size_t>(rank)], options);
    std::vector<float>& out = ran.out[static_cast<size_t>(rank)];
    out = input(rank, count, 3);
    RILL_RETURN_IF_ERROR(c.all_reduce(out, out, 11, op));  // in place
    ran.algorithm[static_cast<size_t>(rank)] = c.last_algorithm();
    return Status::ok_status();
  });
  check_all_ok(statuses);
  return ran;
}

}  // namespace

TEST_CASE("an all-reduce on several machines alike goes within each first: the sum, the same bits on every rank") {
  // Ranks grouped by machine, interleaved, three machines, uneven blocks.
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1}, {0, 0, 0, 1, 1, 1}, {0, 1, 0, 1}, {0, 0, 1, 1, 2, 2}};
  for (const std::vector<int>& machines : layouts) {
    const int world = static_cast<int>(machines.size());
    for (size_t count : {size_t{20001}, size_t{65537}}) {
      CAPTURE(world);
      CAPTURE(count);
      const Ran summed = all_reduce_on(machines, count, ReduceOp::kSum);
      const std::vector<float> want = sum(world, count, 3);
      for (int r = 0; r < world; ++r) {
        CHECK(summed.algorithm[static_cast<size_t>(r)] == "machines first");
        CHECK(expect_equal(summed.out[static_cast<size_t>(r)], want, "sum").ok());
      }
      // The average: the sum divided once by the whole world.
      const Ran averaged = all_reduce_on(machines, count, ReduceOp::kAverage);
      std::vector<float> mean = want;
      for (float& v : mean) v /= static_cast<float>(world);
      for (int r = 0; r < world; ++r) CHECK(expect_equal(averaged.out[static_cast<size_t>(r)], mean, "average").ok());
      const Ran most = all_reduce_on(machines, count, ReduceOp::kMax);
      for (size_t i = 0; i < count; ++i) {
        float top = value(0, i, 3);
        for (int r = 1; r < world; ++r) top = std::max(top, value(r, i, 3));
        for (int r = 0; r < world; ++r)
          if (most.out[static_cast<size_t>(r)][i] != top) {
            FAIL("max: rank " << r << " element " << i << " is " << most.out[static_cast<size_t>(r)][i]);
          }
      }
    }
  }
}

TEST_CASE("machines first for i32 and bf16; the flat ring where machines differ; small tensors one hop") {
  const std::vector<int> machines = {0, 0, 1, 1};
  auto transports = make_inproc_transports(4);
  auto statuses = run_ranks(4, [&](int rank) -> Status {
    CollectiveOptions options;
    options.machines = machines;
    Collectives c(*transports[static_cast<size_t>(rank)], options);
    const size_t count = 40001;
    std::vector<int32_t> ints(count), int_sum(count);
    std::vector<BFloat16> halves(count), half_sum(count);
    for (size_t i = 0; i < count; ++i) {
      ints[i] = static_cast<int32_t>(value(rank, i, 5));
      halves[i] = BFloat16::from_float(value(rank, i, 5));
    }
    RILL_RETURN_IF_ERROR(c.all_reduce(std::span<const int32_t>(ints), int_sum, 21));
    if (std::string(c.last_algorithm()) != "machines first") return internal_error("i32: {}", c.last_algorithm());
    RILL_RETURN_IF_ERROR(c.all_reduce(std::span<const BFloat16>(halves), half_sum, 22));
    const std::vector<float> want = sum(4, count, 5);
    for (size_t i = 0; i < count; ++i)
      if (int_sum[i] != static_cast<int32_t>(want[i]) || half_sum[i].to_float() != want[i])
        return internal_error("element {}: i32 {}, bf16 {}, expected {}", i, int_sum[i], half_sum[i].to_float(),
                              want[i]);
    // A tensor under direct_bytes: one exchange among all, as without machines.
    std::vector<float> small = input(rank, 100, 1);
    RILL_RETURN_IF_ERROR(c.all_reduce(small, small, 23));
    if (std::string(c.last_algorithm()) != "direct") return internal_error("small: {}", c.last_algorithm());
    return expect_equal(small, sum(4, 100, 1), "small");
  });
  check_all_ok(statuses);
  // Three ranks on one machine, one on another: the flat ring.
  const Ran uneven = all_reduce_on({0, 0, 0, 1}, 20001, ReduceOp::kSum);
  for (int r = 0; r < 4; ++r) {
    CHECK(uneven.algorithm[static_cast<size_t>(r)] == "ring");
    CHECK(expect_equal(uneven.out[static_cast<size_t>(r)], sum(4, 20001, 3), "uneven").ok());
  }
  // One rank a machine: the ring too.
  CHECK(all_reduce_on({0, 1, 2}, 20001, ReduceOp::kSum).algorithm[0] == "ring");
  // Given scratch (boxing's, sized for the ring, which needs none): the ring.
  auto given = make_inproc_transports(4);
  auto ringed = run_ranks(4, [&](int rank) -> Status {
    CollectiveOptions options;
    options.machines = machines;
    Collectives c(*given[static_cast<size_t>(rank)], options);
    std::vector<std::byte> scratch(64);
    c.use_scratch(scratch);
    std::vector<float> v = input(rank, 20001, 4);
    RILL_RETURN_IF_ERROR(c.all_reduce(v, v, 9));
    if (std::string(c.last_algorithm()) != "ring") return internal_error("with scratch: {}", c.last_algorithm());
    return expect_equal(v, sum(4, 20001, 4), "with scratch");
  });
  check_all_ok(ringed);
}

// What crosses machines, counted at every rank: with 2 machines of 2 ranks
// the flat ring's two boundary links carry 2 * 3/4 of the tensor each (3x
// the tensor in all), the lanes' rings 2 * 1/2 of half of it each, for 4
// ranks (2x); with 2 of 3, 3.33x against 2x. Headers add under 1%.
TEST_CASE("machines first sends fewer bytes across machines than the flat ring") {
  for (const std::vector<int>& machines : {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 0, 1, 1, 1}}) {
    const int world = static_cast<int>(machines.size());
    CAPTURE(world);
    auto across = [&](bool tiered) {
      auto inner = make_inproc_transports(world);
      std::vector<std::unique_ptr<CountingTransport>> counted;
      for (auto& t : inner) counted.push_back(std::make_unique<CountingTransport>(std::move(t)));
      const size_t count = 262144;  // 1 MiB
      auto statuses = run_ranks(world, [&](int rank) -> Status {
        CollectiveOptions options;
        if (tiered) options.machines = machines;
        Collectives c(*counted[static_cast<size_t>(rank)], options);
        std::vector<float> v = input(rank, count, 2);
        return c.all_reduce(v, v, 5);
      });
      check_all_ok(statuses);
      int64_t bytes = 0;  // received from another machine, by every rank
      for (int r = 0; r < world; ++r) {
        const std::vector<int64_t> from = counted[static_cast<size_t>(r)]->received_bytes_from();
        for (int q = 0; q < world; ++q)
          if (machines[static_cast<size_t>(q)] != machines[static_cast<size_t>(r)]) bytes += from[static_cast<size_t>(q)];
      }
      return static_cast<double>(bytes) / (count * sizeof(float));
    };
    const double flat = across(false), tiered = across(true);
    CAPTURE(flat);
    CAPTURE(tiered);
    CHECK(tiered == doctest::Approx(2.0).epsilon(0.01));
    CHECK(flat == doctest::Approx(world == 4 ? 3.0 : 10.0 / 3.0).epsilon(0.01));
  }
}
