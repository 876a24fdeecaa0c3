// Dropout's mask as a function of place, not of layout: element `index` of
// the logical tensor an op of seed `seed` sees at step `step` is kept when a
// counter-based hash (SplitMix64's finalizer) of (seed, step, index) lies
// at or above rate * 2^24. Nothing is drawn in sequence, so the CPU and
// CUDA kernels, any split over devices and nodes, and the backward pass
// (dropout again, with the same attrs) all see one mask. A micro-batch's
// tensor is the rows micro * rows .. of the step's batch, so its elements
// continue the step's count: index = micro * (elements of the micro-batch)
// + the element's row-major place in it, the same mask as the whole batch
// in one go.
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace rill::dropout_math {

inline constexpr int kMaskBits = 24;

RILL_HOST_DEVICE inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The key of one op's mask at one step.
RILL_HOST_DEVICE inline uint64_t step_key(int64_t seed, int64_t step) {
  return mix(mix(static_cast<uint64_t>(seed)) ^ (static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ull));
}

// rate in [0, 1) as the threshold the hash's top kMaskBits bits are compared with.
RILL_HOST_DEVICE inline uint32_t threshold(double rate) {
  return static_cast<uint32_t>(rate * static_cast<double>(1u << kMaskBits) + 0.5);
}

RILL_HOST_DEVICE inline bool keep(uint64_t key, uint64_t index, uint32_t threshold) {
  return static_cast<uint32_t>(mix(key + index * 0x9e3779b97f4a7c15ull) >> (64 - kMaskBits)) >= threshold;
}

}  // namespace rill::dropout_math
