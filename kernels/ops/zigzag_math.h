// The zigzag order of a sequence, ring attention's load balance (as
// Megatron's and torchtitan's): the sequence's places cut into 2 p chunks of
// equal length and laid as chunk 0, chunk 2p-1, chunk 1, chunk 2p-2, ..., so
// that piece k of a contiguous split into p pieces holds chunk k (early) and
// chunk 2p-1-k (late), and a causal mask gives every piece the same work.
// The `zigzag` op (zigzag.cc) puts a tensor in this order along one axis;
// attention's causal mask reads places through it (attention.cc). p <= 1
// is the natural order. Host and device code; pure.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RILL_ZIGZAG_HD __host__ __device__
#else
#define RILL_ZIGZAG_HD
#endif

namespace rill {

struct Zigzag {
  int64_t length = 0;  // places in the sequence (a multiple of 2 parts when parts > 1)
  int64_t parts = 1;

  RILL_ZIGZAG_HD bool natural() const { return parts <= 1; }
  RILL_ZIGZAG_HD int64_t chunk() const { return natural() ? length : length / (2 * parts); }
  // The chunk of the sequence at slot `slot` of the zigzag order.
  RILL_ZIGZAG_HD int64_t chunk_at(int64_t slot) const {
    return slot % 2 == 0 ? slot / 2 : 2 * parts - 1 - slot / 2;
  }
  // The place in the sequence of index `i` of the zigzag order.
  RILL_ZIGZAG_HD int64_t place(int64_t i) const {
    if (natural()) return i;
    const int64_t c = chunk();
    return chunk_at(i / c) * c + i % c;
  }
  // How many indexes from `i` on (at most `n`) hold consecutive places: the
  // rest of i's chunk.
  RILL_ZIGZAG_HD int64_t run(int64_t i, int64_t n) const {
    if (natural()) return n;
    const int64_t left = chunk() - i % chunk();
    return left < n ? left : n;
  }
};

// The zigzag op's copies along `axis` of a tensor of `shape`: for each slot
// of the order, fn(src_origin, dst_origin, extent) copies one chunk, from its
// place into its slot (or back, `inverse`). Host code.
template <typename Origin, typename Extent, typename Fn>
void for_each_zigzag_chunk(const Extent& shape, int axis, int64_t parts, bool inverse, Fn&& fn) {
  const Zigzag z{shape[axis], parts < 1 ? 1 : parts};
  const int64_t c = z.natural() ? shape[axis] : z.chunk();
  Extent extent = shape;
  extent[axis] = c;
  Origin from{}, to{};
  for (int64_t slot = 0; slot * c < shape[axis]; ++slot) {
    const int64_t place = z.natural() ? 0 : z.chunk_at(slot) * c;
    from[axis] = inverse ? slot * c : place;
    to[axis] = inverse ? place : slot * c;
    fn(from, to, extent);
  }
}

}  // namespace rill
