// Slot packing: where one thread's shareable slots go in a zone's block
// (memory_plan's packing), and the check that no two of them that may be
// live at once overlap (check_memory_plan's), both by the relation of
// compiler/regst_lifetimes.h without listing the pairs: two slots may be
// live at once when a start of one's productions falls in live() of one
// of the other's.
//
// The placed slots are kept in two trees over the thread's start ranks,
// each node holding the bytes its slots take as coalesced spans: one by
// each production's start (every node above it), one by each production's
// live() runs (the nodes that cover a run). The bytes a new slot may not
// take are those of the nodes covering its productions' runs in the first
// tree and of the nodes above its starts in the second: O(log ranks) sets
// a production. Their spans, merged by begin, give the lowest clear
// offset as the packing's scan over every placed slot gave it (merging
// touching spans clears no offset), so the offsets are the same. The
// merge walks the spans below that offset: few where slots live at once
// stack up within one node (coalesced), as many as the stack where its
// slots' starts lie in many nodes (a transformer's activations with
// micro-batches: docs/STATUS_CPU.md, compile scale).
// Internal to memory_plan; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/regst_lifetimes.h"

namespace rill::compiler {

class PlacedSlots {
 public:
  // Slots of `thread`; `work`, when given, counts nodes and spans visited.
  PlacedSlots(const RegstLifetimes& lifetimes, uint64_t thread, int64_t* work);

  // The lowest offset where `bytes` bytes are clear of every placed slot
  // that `unit` may be live with.
  int64_t lowest(int unit, int64_t bytes);
  // Whether [begin, end) meets a placed slot that `unit` may be live with.
  bool meets(int unit, int64_t begin, int64_t end);
  void place(int unit, int64_t begin, int64_t end);

 private:
  struct Span {
    int64_t begin, end;
  };
  // Disjoint spans, ascending; touching ones merged.
  struct Spans {
    std::vector<Span> spans;
    void add(Span s);
    const Span* meeting(int64_t begin, int64_t end) const;  // the first that meets [begin, end)
  };
  void gather(int unit);
  Spans& at(std::vector<uint32_t>& tree, uint32_t node);

  const RegstLifetimes& lifetimes_;
  int64_t* work_;
  int64_t scratch_ = 0;  // work_ when none is given
  uint32_t leaves_ = 1;  // a power of two, at least the ranks
  // Tree nodes 1 .. 2 leaves - 1 (leaf of rank r: leaves + r) -> sets_ + 1
  // (0: none yet).
  std::vector<uint32_t> by_start_, by_run_;
  std::vector<Spans> sets_;
  std::vector<const Spans*> gathered_;
};

// A group's slots (units of one thread, with their bytes) in the order
// they are packed: each at the lowest offset clear of every slot before
// it that it may be live with. Returns their offsets from the group's
// start.
std::vector<int64_t> pack_slots(const RegstLifetimes& lifetimes, uint64_t thread,
                                const std::vector<std::pair<int, int64_t>>& units, int64_t* work);

// Two slots of a thread, placed at [begin, end) each, that may be live at
// once and overlap, if any.
struct PlacedSlot {
  int unit;
  int64_t begin, end;
};
std::optional<std::pair<PlacedSlot, PlacedSlot>> overlap_live(const RegstLifetimes& lifetimes, uint64_t thread,
                                                              const std::vector<PlacedSlot>& slots, int64_t* work);

}  // namespace rill::compiler
