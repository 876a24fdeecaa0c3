#include "compiler/slot_packing.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <queue>

namespace rill::compiler {

PlacedSlots::PlacedSlots(const RegstLifetimes& lifetimes, uint64_t thread, int64_t* work)
    : lifetimes_(lifetimes), work_(work != nullptr ? work : &scratch_),
      leaves_(std::bit_ceil(std::max<uint32_t>(1, lifetimes.ranks(thread)))), by_start_(2 * leaves_, 0),
      by_run_(2 * leaves_, 0) {}

void PlacedSlots::Spans::add(Span s) {
  auto first = std::lower_bound(spans.begin(), spans.end(), s.begin, [](const Span& x, int64_t v) { return x.end < v; });
  auto last = first;
  for (; last != spans.end() && last->begin <= s.end; ++last) {
    s.begin = std::min(s.begin, last->begin);
    s.end = std::max(s.end, last->end);
  }
  if (first == last) {
    spans.insert(first, s);
  } else {
    *first = s;
    spans.erase(first + 1, last);
  }
}

const PlacedSlots::Span* PlacedSlots::Spans::meeting(int64_t begin, int64_t end) const {
  auto it = std::lower_bound(spans.begin(), spans.end(), begin, [](const Span& x, int64_t v) { return x.end <= v; });
  return it != spans.end() && it->begin < end ? &*it : nullptr;
}

PlacedSlots::Spans& PlacedSlots::at(std::vector<uint32_t>& tree, uint32_t node) {
  if (tree[node] == 0) {
    sets_.emplace_back();
    tree[node] = static_cast<uint32_t>(sets_.size());
  }
  ++*work_;
  return sets_[tree[node] - 1];
}

// The sets holding the placed slots `unit` may be live with: by start,
// the nodes covering each of its runs; by run, the nodes above each of its
// starts.
void PlacedSlots::gather(int unit) {
  gathered_.clear();
  auto take = [&](uint32_t set) {
    ++*work_;
    if (set != 0) gathered_.push_back(&sets_[set - 1]);
  };
  for (int k = 0; k < lifetimes_.productions(unit); ++k) {
    const RegstLifetimes::Live live = lifetimes_.production(unit, k);
    for (const RegstLifetimes::Run& run : live.runs)
      for (uint32_t l = run.begin + leaves_, r = run.end + leaves_; l < r; l >>= 1, r >>= 1) {
        if (l & 1) take(by_start_[l++]);
        if (r & 1) take(by_start_[--r]);
      }
    for (uint32_t node = live.start + leaves_; node >= 1; node >>= 1) take(by_run_[node]);
  }
  std::sort(gathered_.begin(), gathered_.end());
  gathered_.erase(std::unique(gathered_.begin(), gathered_.end()), gathered_.end());
}

// The spans of the gathered sets by their begins, as a scan of all of
// them sorted would take them: while one begins less than `bytes` past the
// offset so far, the offset moves to its end. The sets wait in a heap by
// their next span's begin; a set's spans that begin so close are taken at
// once, by bisection (many where its spans leave gaps too small).
int64_t PlacedSlots::lowest(int unit, int64_t bytes) {
  gather(unit);
  using Next = std::pair<int64_t, std::pair<const Spans*, size_t>>;  // (begin, (set, span))
  std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
  for (const Spans* set : gathered_)
    if (!set->spans.empty()) next.push({set->spans[0].begin, {set, 0}});
  int64_t offset = 0;
  while (!next.empty() && next.top().first < offset + bytes) {
    const auto [set, first] = next.top().second;
    next.pop();
    const std::vector<Span>& spans = set->spans;
    for (size_t i = first;;) {
      ++*work_;
      const auto past = std::lower_bound(spans.begin() + static_cast<std::ptrdiff_t>(i), spans.end(), offset + bytes,
                                         [](const Span& x, int64_t v) { return x.begin < v; });
      const auto j = static_cast<size_t>(past - spans.begin());
      if (j == i) {
        if (j < spans.size()) next.push({spans[j].begin, {set, j}});
        break;
      }
      offset = std::max(offset, spans[j - 1].end);  // coalesced: the ends ascend too
      i = j;
    }
  }
  *work_ += static_cast<int64_t>(gathered_.size());
  return offset;
}

bool PlacedSlots::meets(int unit, int64_t begin, int64_t end) {
  gather(unit);
  *work_ += static_cast<int64_t>(gathered_.size());
  return std::any_of(gathered_.begin(), gathered_.end(), [&](const Spans* set) { return set->meeting(begin, end); });
}

void PlacedSlots::place(int unit, int64_t begin, int64_t end) {
  for (int k = 0; k < lifetimes_.productions(unit); ++k) {
    const RegstLifetimes::Live live = lifetimes_.production(unit, k);
    for (uint32_t node = live.start + leaves_; node >= 1; node >>= 1) at(by_start_, node).add({begin, end});
    for (const RegstLifetimes::Run& run : live.runs)
      for (uint32_t l = run.begin + leaves_, r = run.end + leaves_; l < r; l >>= 1, r >>= 1) {
        if (l & 1) at(by_run_, l++).add({begin, end});
        if (r & 1) at(by_run_, --r).add({begin, end});
      }
  }
}

std::vector<int64_t> pack_slots(const RegstLifetimes& lifetimes, uint64_t thread,
                                const std::vector<std::pair<int, int64_t>>& units, int64_t* work) {
  PlacedSlots placed(lifetimes, thread, work);
  std::vector<int64_t> offsets;
  offsets.reserve(units.size());
  for (const auto& [unit, bytes] : units) {
    offsets.push_back(placed.lowest(unit, bytes));
    placed.place(unit, offsets.back(), offsets.back() + bytes);
  }
  return offsets;
}

std::optional<std::pair<PlacedSlot, PlacedSlot>> overlap_live(const RegstLifetimes& lifetimes, uint64_t thread,
                                                              const std::vector<PlacedSlot>& slots, int64_t* work) {
  PlacedSlots placed(lifetimes, thread, work);
  for (size_t i = 0; i < slots.size(); ++i) {
    const PlacedSlot& s = slots[i];
    if (!placed.meets(s.unit, s.begin, s.end)) {
      placed.place(s.unit, s.begin, s.end);
      continue;
    }
    // Which one, by the pair test (once, on the way to an error).
    const auto [regst, slot] = lifetimes.slot_of(s.unit);
    for (size_t j = 0; j < i; ++j) {
      const auto [other, other_slot] = lifetimes.slot_of(slots[j].unit);
      if (slots[j].begin < s.end && s.begin < slots[j].end && !lifetimes.apart(other, other_slot, regst, slot))
        return std::pair{slots[j], s};
    }
    return std::pair{s, s};  // not reached: the two tests agree
  }
  return std::nullopt;
}

}  // namespace rill::compiler
