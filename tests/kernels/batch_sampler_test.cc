#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "kernels/data/batch_sampler.h"

namespace rill {
namespace {

std::vector<int64_t> shard_indices(BatchSampler& sampler, int64_t step) {
  std::vector<int64_t> out(static_cast<size_t>(sampler.local_batch()), -1);
  sampler.indices(step, out);
  return out;
}

// The whole global batch `step`, as the concatenation of every shard's rows.
std::vector<int64_t> global_batch(std::vector<BatchSampler>& shards, int64_t step) {
  std::vector<int64_t> all;
  for (BatchSampler& shard : shards) {
    std::vector<int64_t> part = shard_indices(shard, step);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

std::vector<BatchSampler> make_shards(int64_t samples, int64_t batch, int num_shards, bool shuffle, uint64_t seed) {
  std::vector<BatchSampler> shards;
  for (int k = 0; k < num_shards; ++k) shards.emplace_back(samples, batch, k, num_shards, shuffle, seed);
  return shards;
}

}  // namespace

TEST_SUITE("data") {

TEST_CASE("batch sampler splits a global batch in balanced S(0) pieces") {
  std::vector<BatchSampler> shards = make_shards(103, 10, 3, true, 7);
  CHECK(shards[0].local_batch() == 4);
  CHECK(shards[1].local_batch() == 3);
  CHECK(shards[2].local_batch() == 3);
  for (const BatchSampler& shard : shards) {
    CHECK(shard.validate().ok());
    CHECK(shard.steps_per_epoch() == 10);  // 103 / 10, remainder dropped
  }
}

TEST_CASE("batch sampler shards are disjoint and cover each global batch and each epoch") {
  for (bool shuffle : {true, false}) {
    CAPTURE(shuffle);
    std::vector<BatchSampler> shards = make_shards(103, 10, 3, shuffle, 7);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::set<int64_t> seen_in_epoch;
      for (int64_t s = 0; s < 10; ++s) {
        std::vector<int64_t> batch = global_batch(shards, epoch * 10 + s);
        REQUIRE(batch.size() == 10);
        for (int64_t index : batch) {
          CHECK(index >= 0);
          CHECK(index < 103);
          // Once per epoch: no overlap between shards, batches or steps.
          CHECK(seen_in_epoch.insert(index).second);
        }
      }
      CHECK(seen_in_epoch.size() == 100);
    }
  }
}

TEST_CASE("one shard sees what the concatenation of two shards sees") {
  for (bool shuffle : {true, false}) {
    CAPTURE(shuffle);
    std::vector<BatchSampler> one = make_shards(50, 8, 1, shuffle, 99);
    std::vector<BatchSampler> two = make_shards(50, 8, 2, shuffle, 99);
    // Steps out of order on purpose: revisiting an epoch recomputes its permutation.
    for (int64_t step : {0, 1, 5, 6, 7, 13, 2, 40, 0}) {
      CAPTURE(step);
      CHECK(global_batch(one, step) == global_batch(two, step));
    }
  }
}

TEST_CASE("shuffled epochs differ and depend on the seed; no shuffle is the identity") {
  BatchSampler a(64, 16, 0, 1, true, 5), b(64, 16, 0, 1, true, 5), other_seed(64, 16, 0, 1, true, 6);
  std::vector<int64_t> epoch0, epoch1, epoch0_again;
  for (int64_t s = 0; s < 4; ++s) {
    for (int64_t i : shard_indices(a, s)) epoch0.push_back(i);
    for (int64_t i : shard_indices(a, 4 + s)) epoch1.push_back(i);
  }
  for (int64_t s = 0; s < 4; ++s)
    for (int64_t i : shard_indices(b, s)) epoch0_again.push_back(i);
  CHECK(epoch0 == epoch0_again);
  CHECK(epoch0 != epoch1);
  std::vector<int64_t> identity(64);
  for (int64_t i = 0; i < 64; ++i) identity[i] = i;
  CHECK(epoch0 != identity);
  CHECK(std::is_permutation(epoch0.begin(), epoch0.end(), identity.begin()));
  CHECK(shard_indices(other_seed, 0) != shard_indices(a, 0));

  BatchSampler plain(64, 16, 1, 2, false, 5);
  CHECK(shard_indices(plain, 0) == std::vector<int64_t>{8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(shard_indices(plain, 6) == std::vector<int64_t>{40, 41, 42, 43, 44, 45, 46, 47});
}

TEST_CASE("the shuffle is a fixed algorithm: pinned output") {
  // Shards on different machines must agree, whatever compiler built them.
  BatchSampler sampler(10, 10, 0, 1, true, 1);
  CHECK(shard_indices(sampler, 0) == std::vector<int64_t>{4, 6, 8, 9, 3, 5, 7, 2, 0, 1});
}

TEST_CASE("micro-batches: split over the shards in turn, or (by rank) each shard's own rows in turn") {
  // Global batch 8 over 2 nodes x 2 devices, 2 micro-batches, no shuffle.
  auto rows = [](bool by_rank, int shard, int sub, int64_t micro) {
    BatchSampler sampler(64, 8, shard, 2, false, 0, sub, 2, 2, by_rank);
    REQUIRE(sampler.validate().ok());
    std::vector<int64_t> out(static_cast<size_t>(sampler.local_batch()), -1);
    sampler.indices(1, micro, out);
    return out;
  };
  // Micro-batch j is rows [8 + 4j, 12 + 4j) of step 1, one row per device.
  CHECK(rows(false, 0, 0, 0) == std::vector<int64_t>{8});
  CHECK(rows(false, 1, 1, 0) == std::vector<int64_t>{11});
  CHECK(rows(false, 0, 1, 1) == std::vector<int64_t>{13});
  // By rank: device (n, d) owns rows 8 + 2 (2n + d) and the next; micro-batch
  // j is the j-th of them, as a rank of a DDP job reads its own batch.
  CHECK(rows(true, 0, 0, 0) == std::vector<int64_t>{8});
  CHECK(rows(true, 0, 0, 1) == std::vector<int64_t>{9});
  CHECK(rows(true, 1, 0, 0) == std::vector<int64_t>{12});
  CHECK(rows(true, 1, 1, 1) == std::vector<int64_t>{15});
  // A rank's rows must divide by the micro-batches.
  BatchSampler odd(64, 12, 0, 2, false, 0, 0, 2, 2, true);  // 3 rows a rank
  CHECK(odd.validate().message().find("reads 3 rows of each batch, which 2 micro-batches do not divide") !=
        std::string::npos);
}

TEST_CASE("batch sampler rejects configurations it cannot serve, without crashing") {
  BatchSampler too_big(5, 8, 0, 2, true, 0);
  CHECK(too_big.steps_per_epoch() == 0);
  CHECK(too_big.validate().message().find("global batch 8 is larger than the dataset's 5 samples") !=
        std::string::npos);

  BatchSampler bad_shard(100, 8, 2, 2, true, 0);
  CHECK(bad_shard.steps_per_epoch() == 0);
  CHECK(bad_shard.validate().message().find("shard 2 is out of range [0, 2)") != std::string::npos);

  BatchSampler tiny_batch(100, 2, 0, 4, true, 0);
  CHECK(tiny_batch.validate().message().find("smaller than the 4 shards") != std::string::npos);

  CHECK_FALSE(BatchSampler(100, 0, 0, 1, true, 0).validate().ok());
  CHECK_FALSE(BatchSampler(100, 4, 0, 0, true, 0).validate().ok());
  CHECK_FALSE(BatchSampler(0, 4, 0, 1, true, 0).validate().ok());
}

}  // TEST_SUITE

}  // namespace rill
