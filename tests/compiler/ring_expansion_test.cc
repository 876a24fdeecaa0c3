// Ring attention's wiring (compiler/ring_expansion.h): which rank's piece a
// step r places back reads, wrapping from the sequence's start to its end,
// on 1-D and 2-D placements (the sequence split within nodes, across them,
// or over all), a same-node copy preferred among replicas, and no rank
// where the cut is uneven.
#include "compiler/ring_expansion.h"

#include <doctest/doctest.h>

namespace rill::compiler {
namespace {

graph::Placement grid(int nodes, int per_node) {
  graph::Placement p;
  for (int n = 0; n < nodes; ++n) p.nodes.push_back(n);
  for (int d = 0; d < per_node; ++d) p.devices.push_back(d);
  p.two_d = nodes > 1;
  return p;
}

TEST_CASE("ring_source: the rank holding the piece r places back along the sequence") {
  const Shape qkv = {2, 4, 8, 16};  // [batch, heads, T, D]
  const graph::Placement four = grid(1, 4);
  const NdSbp seq(Sbp::split(2));
  for (int rank = 0; rank < 4; ++rank)
    for (int steps = 0; steps < 6; ++steps) {
      CAPTURE(rank);
      CAPTURE(steps);
      CHECK(ring_source(qkv, seq, four, 2, rank, steps) == ((rank - steps) % 4 + 4) % 4);
    }
  // 2 nodes x 2 devices. The batch across nodes, the sequence within: the
  // ring stays on the node.
  const graph::Placement two_by_two = grid(2, 2);
  const NdSbp batch_seq(Sbp::split(0), Sbp::split(2));
  CHECK(ring_source(qkv, batch_seq, two_by_two, 2, 0, 1) == 1);
  CHECK(ring_source(qkv, batch_seq, two_by_two, 2, 3, 1) == 2);
  // The sequence across nodes, the heads within: device d reads device d of
  // the other node.
  const NdSbp seq_heads(Sbp::split(2), Sbp::split(1));
  CHECK(ring_source(qkv, seq_heads, two_by_two, 2, 0, 1) == 2);
  CHECK(ring_source(qkv, seq_heads, two_by_two, 2, 3, 1) == 1);
  // The sequence over all 4, node-major.
  const NdSbp seq_seq(Sbp::split(2), Sbp::split(2));
  CHECK(ring_source(qkv, seq_seq, two_by_two, 2, 2, 1) == 1);
  CHECK(ring_source(qkv, seq_seq, two_by_two, 2, 0, 3) == 1);
  // The sequence across nodes, each node's devices holding copies: a reader
  // takes the other node's first copy (no copy of it on its own node).
  const NdSbp seq_copies(Sbp::split(2), Sbp::broadcast());
  CHECK(ring_source(qkv, seq_copies, two_by_two, 2, 1, 1) == 2);
  // Its own piece (0 steps), of which its node holds copies: its own.
  CHECK(ring_source(qkv, seq_copies, two_by_two, 2, 1, 0) == 1);
  // An uneven cut (6 places over 4: 2, 2, 1, 1): no rank holds rank 0's piece one place back.
  CHECK(ring_source({1, 1, 6, 4}, seq, four, 2, 0, 1) == -1);
}

}  // namespace
}  // namespace rill::compiler
