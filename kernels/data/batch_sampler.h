// BatchSampler: which samples make up this shard's part of each global batch.
// Every shard computes the same seeded permutation per epoch, so shards never
// overlap and together cover each global batch (like PyTorch's
// DistributedSampler). Shard k gets rows [split_offset(B, n, k),
// split_offset(B, n, k + 1)) of global batch B, matching the physical pieces
// of an S(0) tensor; with sub-shards, sub-shard j of m gets part j of m of
// those rows (the pieces of a 2-D (S(0), S(0)) tensor: by node, then device).
//
// The permutation of epoch e is a Fisher-Yates shuffle driven by an
// mt19937_64 seeded from (seed, e), with our own bounded draws: every compiler
// and standard library produces the same order, so shards on different nodes
// agree. Without shuffle the order is the identity.
//
// Threading: one instance per source actor, used from that actor's thread only
// (indices() caches the current epoch's permutation).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"

namespace rill {

class BatchSampler {
 public:
  // Never fails or crashes: a configuration that cannot run (for instance a
  // global batch larger than the dataset) yields steps_per_epoch() == 0 and a
  // validate() error explaining why.
  // With `micro_batches` K, each step's global batch is read as K
  // micro-batches of global_batch / K rows (in order), each split over the
  // shards; with `by_rank` (the mirrored view, where each rank owns its rows)
  // each shard reads its own rows of the global batch, K micro-batches of
  // them (its rows must divide by K).
  BatchSampler(int64_t num_samples, int64_t global_batch, int shard, int num_shards, bool shuffle, uint64_t seed,
               int sub_shard = 0, int num_sub_shards = 1, int64_t micro_batches = 1, bool by_rank = false);

  // Ok when every step has samples for every shard; otherwise says what is wrong.
  Status validate() const;
  // This shard's rows of a (micro-)batch (balanced split over the shards).
  int64_t local_batch() const { return local_batch_; }
  // num_samples / global_batch, the remainder dropped; 0 when validate() fails.
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Writes local_batch() sample indices for this shard's rows of global batch
  // `step` (0-based, counting across epochs) into out. Allocates nothing; the
  // first step of an epoch recomputes the permutation in place.
  // REQUIRES: validate().ok(), step >= 0, out.size() >= local_batch().
  // `micro`: which micro-batch of the step (0 without micro-batches).
  void indices(int64_t step, int64_t micro, std::span<int64_t> out);
  void indices(int64_t step, std::span<int64_t> out) { indices(step, 0, out); }

 private:
  void shuffle_epoch(int64_t epoch);
  // This shard's part of `rows` split over the shards, then the sub-shards:
  // (its first row, its number of rows).
  std::pair<int64_t, int64_t> part_of(int64_t rows) const;

  int64_t num_samples_;
  int64_t global_batch_;
  int64_t micro_batches_;
  bool by_rank_;
  int shard_;
  int num_shards_;
  int sub_shard_;
  int num_sub_shards_;
  bool shuffle_;
  uint64_t seed_;
  int64_t row_begin_ = 0;  // first row of this shard in a global batch
  int64_t local_batch_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t epoch_ = -1;  // epoch whose permutation is in permutation_
  std::vector<int64_t> permutation_;  // num_samples entries when shuffling
};

}  // namespace rill
