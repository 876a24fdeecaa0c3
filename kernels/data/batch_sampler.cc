#include "kernels/data/batch_sampler.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>

#include "kernels/tensor.h"

namespace rill {
namespace {

// SplitMix64's finalizer: spreads (seed, epoch) into well-mixed generator seeds.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, bound) by rejection, without modulo bias. Spelled out because
// std::uniform_int_distribution's algorithm differs between standard libraries.
uint64_t uniform_below(std::mt19937_64& gen, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    uint64_t r = gen();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

BatchSampler::BatchSampler(int64_t num_samples, int64_t global_batch, int shard, int num_shards, bool shuffle,
                           uint64_t seed, int sub_shard, int num_sub_shards, int64_t micro_batches, bool by_rank)
    : num_samples_(num_samples),
      global_batch_(global_batch),
      micro_batches_(micro_batches),
      by_rank_(by_rank),
      shard_(shard),
      num_shards_(num_shards),
      sub_shard_(sub_shard),
      num_sub_shards_(num_sub_shards),
      shuffle_(shuffle),
      seed_(seed) {
  if (!validate().ok()) return;
  // The rows split over the shards: a micro-batch's, or (by rank) the whole batch's.
  std::tie(row_begin_, local_batch_) = part_of(by_rank_ ? global_batch_ : global_batch_ / micro_batches_);
  if (by_rank_) local_batch_ /= micro_batches_;  // validate(): it divides
  steps_per_epoch_ = num_samples_ / global_batch_;
  if (shuffle_) permutation_.resize(static_cast<size_t>(num_samples_));
}

std::pair<int64_t, int64_t> BatchSampler::part_of(int64_t rows) const {
  const int64_t shard_begin = split_offset(rows, num_shards_, shard_);
  const int64_t shard_rows = split_offset(rows, num_shards_, shard_ + 1) - shard_begin;
  const int64_t sub_begin = split_offset(shard_rows, num_sub_shards_, sub_shard_);
  return {shard_begin + sub_begin, split_offset(shard_rows, num_sub_shards_, sub_shard_ + 1) - sub_begin};
}

Status BatchSampler::validate() const {
  if (num_shards_ <= 0) return invalid_argument("batch sampler: {} shards; need at least 1", num_shards_);
  if (shard_ < 0 || shard_ >= num_shards_) {
    return invalid_argument("batch sampler: shard {} is out of range [0, {})", shard_, num_shards_);
  }
  if (num_sub_shards_ <= 0 || sub_shard_ < 0 || sub_shard_ >= num_sub_shards_)
    return invalid_argument("batch sampler: sub-shard {} is out of range [0, {})", sub_shard_, num_sub_shards_);
  if (num_samples_ <= 0) return invalid_argument("batch sampler: the dataset has {} samples", num_samples_);
  if (global_batch_ <= 0) return invalid_argument("batch sampler: global batch is {}; need at least 1", global_batch_);
  if (micro_batches_ <= 0 || global_batch_ % micro_batches_ != 0)
    return invalid_argument("batch sampler: {} micro-batches do not divide the global batch of {}", micro_batches_,
                            global_batch_);
  // The smallest shard has micro_batch / num_shards rows.
  const int64_t micro_batch = global_batch_ / micro_batches_;
  if (micro_batch < num_shards_ || micro_batch / num_shards_ < num_sub_shards_) {
    return invalid_argument("batch sampler: {} {} is smaller than the {} shards it is split over; "
                            "every shard needs at least one row",
                            micro_batches_ > 1 ? "micro-batch" : "global batch", micro_batch,
                            static_cast<int64_t>(num_shards_) * num_sub_shards_);
  }
  if (by_rank_) {
    const int64_t rows = part_of(global_batch_).second;
    if (rows % micro_batches_ != 0 || rows < micro_batches_)
      return invalid_argument("batch sampler: rank {}.{} reads {} rows of each batch, which {} micro-batches do not "
                              "divide", shard_, sub_shard_, rows, micro_batches_);
  }
  if (global_batch_ > num_samples_) {
    return invalid_argument("batch sampler: global batch {} is larger than the dataset's {} samples, so an epoch "
                            "has no full batch; lower the batch size or use more data",
                            global_batch_, num_samples_);
  }
  return Status();
}

void BatchSampler::shuffle_epoch(int64_t epoch) {
  std::mt19937_64 gen(mix64(seed_ ^ mix64(static_cast<uint64_t>(epoch))));
  std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
  for (size_t i = permutation_.size() - 1; i > 0; --i) {
    std::swap(permutation_[i], permutation_[uniform_below(gen, i + 1)]);
  }
  epoch_ = epoch;
}

void BatchSampler::indices(int64_t step, int64_t micro, std::span<int64_t> out) {
  assert(steps_per_epoch_ > 0 && step >= 0 && static_cast<int64_t>(out.size()) >= local_batch_);
  if (steps_per_epoch_ == 0 || step < 0) return;  // validate() explains; never divide by zero
  const int64_t epoch = step / steps_per_epoch_;
  // By rank, micro-batch `micro` is the next local_batch_ of the shard's own
  // rows; else it is the next global_batch / K rows, split over the shards.
  const int64_t first = (step % steps_per_epoch_) * global_batch_ + row_begin_ +
                        micro * (by_rank_ ? local_batch_ : global_batch_ / micro_batches_);
  const int64_t count = std::min<int64_t>(local_batch_, static_cast<int64_t>(out.size()));
  if (!shuffle_) {
    for (int64_t r = 0; r < count; ++r) out[r] = first + r;
    return;
  }
  if (epoch != epoch_) shuffle_epoch(epoch);
  for (int64_t r = 0; r < count; ++r) out[r] = permutation_[first + r];
}

}  // namespace rill
