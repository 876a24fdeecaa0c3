#include "compiler/regst_lifetimes.h"

#include <algorithm>

#include "compiler/unrolled_acts.h"

namespace rill::compiler {

// One thread's pass: ranks its productions' starts in the order, finds
// for every act the later starts it does not precede, and records the
// thread's productions with their end rows.
class RegstLifetimes::ThreadPass {
 public:
  ThreadPass(const UnrolledActs& acts, RegstLifetimes& out)
      : acts_(acts), out_(out), rank_(acts.events, kNone), after_(acts.events),
        first_(acts.events), count_(acts.events, 0), row_(acts.events, kNone) {}

  // The shared regsts [begin, end) of acts.shared, all of one thread.
  void run(size_t begin, size_t end) {
    rank_starts(begin, end);
    if (targets_ == 0) return;
    find_gaps();
    record(begin, end);
    clear();
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  using Event = UnrolledActs::Event;

  // Ranks of the starts by their place in the order; after_[e], the ranks
  // of starts at e or before it.
  void rank_starts(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      for (const UnrolledActs::Production& p : acts_.shared[i].productions) rank_[p.start] = 0;
    uint32_t seen = 0;
    lo_ = kNone;
    for (uint32_t at = 0; at < acts_.order.size(); ++at) {
      const Event e = acts_.order[at];
      if (rank_[e] != kNone) {
        rank_[e] = seen++;
        lo_ = std::min(lo_, at);
        hi_ = at;
      }
      after_[e] = seen;
    }
    targets_ = seen;
  }

  // The first rank before which `e` is placed, itself excluded.
  uint32_t before_rank(Event e) const { return after_[e] - (rank_[e] != kNone ? 1 : 0); }

  // For each act from the last start back to the first (before it no act
  // ends a production; after it no rank is left), the ranks after it that
  // it does not precede: those of every successor s, and the ranks between
  // the act and s (s itself excluded), intersected.
  void find_gaps() {
    for (uint32_t at = hi_ + 1; at-- > lo_;) {
      const Event e = acts_.order[at];
      const uint32_t after = after_[e];
      gaps_.clear();
      if (after < targets_) gaps_.push_back({after, targets_});
      for (uint32_t k = acts_.first[e]; k < acts_.first[e + 1] && !gaps_.empty(); ++k) {
        const Event s = acts_.succ[k];
        unless_.clear();
        if (after < before_rank(s)) unless_.push_back({after, before_rank(s)});
        for (uint32_t g = first_[s]; g < first_[s] + count_[s]; ++g) {
          const Run r = arena_[g];
          if (!unless_.empty() && unless_.back().end >= r.begin)
            unless_.back().end = std::max(unless_.back().end, r.end);
          else
            unless_.push_back(r);
        }
        intersect();
      }
      first_[e] = static_cast<uint32_t>(arena_.size());
      count_[e] = static_cast<uint32_t>(gaps_.size());
      arena_.insert(arena_.end(), gaps_.begin(), gaps_.end());
      out_.work_ += 1 + static_cast<int64_t>(gaps_.size());
    }
  }

  // gaps_ = gaps_ and unless_, both ascending runs.
  void intersect() {
    out_.work_ += static_cast<int64_t>(gaps_.size() + unless_.size());
    both_.clear();
    size_t i = 0, j = 0;
    while (i < gaps_.size() && j < unless_.size()) {
      const uint32_t begin = std::max(gaps_[i].begin, unless_[j].begin);
      const uint32_t end = std::min(gaps_[i].end, unless_[j].end);
      if (begin < end) both_.push_back({begin, end});
      if (gaps_[i].end < unless_[j].end)
        ++i;
      else
        ++j;
    }
    gaps_.swap(both_);
  }

  // The thread's regsts, their productions and their end rows.
  void record(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const UnrolledActs::Shared& shared = acts_.shared[i];
      Info info;
      info.regst = shared.regst->id();
      info.thread = shared.thread;
      info.slots = shared.regst->register_num();
      info.first_unit = out_.units();
      info.first_production = static_cast<uint32_t>(out_.productions_.size());
      info.productions = static_cast<uint32_t>(shared.productions.size());
      out_.index_[info.regst] = static_cast<int>(out_.infos_.size());
      for (int s = 0; s < info.slots; ++s) out_.unit_index_.push_back(static_cast<int>(out_.infos_.size()));
      out_.infos_.push_back(info);
      for (const UnrolledActs::Production& p : shared.productions) {
        Production q;
        q.start = rank_[p.start];
        q.first_end = static_cast<uint32_t>(out_.ends_.size());
        q.ends = static_cast<uint32_t>(p.ends.size());
        q.until = q.start + 1;
        for (Event e : p.ends) {
          const uint32_t row = row_of(e);
          out_.ends_.push_back(row);
          const Row& r = out_.rows_[row];
          q.until = std::max(q.until, r.count == 0 ? r.after : out_.gaps_[r.first + r.count - 1].end);
        }
        out_.productions_.push_back(q);
      }
    }
  }

  uint32_t row_of(Event e) {
    if (row_[e] != kNone) return row_[e];
    row_[e] = static_cast<uint32_t>(out_.rows_.size());
    out_.rows_.push_back({after_[e], static_cast<uint32_t>(out_.gaps_.size()), count_[e]});
    out_.gaps_.insert(out_.gaps_.end(), arena_.begin() + first_[e], arena_.begin() + first_[e] + count_[e]);
    touched_.push_back(e);
    return row_[e];
  }

  // Ready for the next thread.
  void clear() {
    for (uint32_t at = lo_; at <= hi_; ++at) {
      const Event e = acts_.order[at];
      rank_[e] = kNone;
      count_[e] = 0;
    }
    for (Event e : touched_) row_[e] = kNone;
    touched_.clear();
    arena_.clear();
  }

  const UnrolledActs& acts_;
  RegstLifetimes& out_;
  std::vector<uint32_t> rank_, after_, first_, count_, row_;  // by event
  std::vector<Run> arena_, gaps_, unless_, both_;
  std::vector<Event> touched_;
  uint32_t targets_ = 0, lo_ = 0, hi_ = 0;  // starts; the first and last one's place in the order
};

RegstLifetimes RegstLifetimes::analyze(const plan::Plan& plan, int node) {
  const UnrolledActs acts = unroll_acts(plan, node);
  RegstLifetimes out;
  out.work_ = acts.events + static_cast<int64_t>(acts.succ.size());
  if (acts.order.empty()) return out;
  ThreadPass pass(acts, out);
  for (size_t begin = 0; begin < acts.shared.size();) {
    size_t end = begin;
    while (end < acts.shared.size() && acts.shared[end].thread == acts.shared[begin].thread) ++end;
    const auto first_info = static_cast<uint32_t>(out.infos_.size());
    pass.run(begin, end);
    out.find_live_together(acts.shared[begin].thread, first_info);
    begin = end;
  }
  return out;
}

// Slots whose productions' spans meet, by a sweep over the starts' ranks;
// each such pair put to the chain test.
void RegstLifetimes::find_live_together(uint64_t thread, uint32_t first_info) {
  struct Span {
    uint32_t start, until;
    int unit;
  };
  std::vector<Span> spans;
  for (size_t i = first_info; i < infos_.size(); ++i) {
    const Info& info = infos_[i];
    for (uint32_t n = 0; n < info.productions; ++n) {
      const Production& p = productions_[info.first_production + n];
      spans.push_back({p.start, p.until, info.first_unit + static_cast<int>(n % static_cast<uint32_t>(info.slots))});
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  std::vector<Span> open;
  std::vector<uint64_t> met;  // unit pairs, smaller first
  for (const Span& s : spans) {
    work_ += 1 + static_cast<int64_t>(open.size());
    std::erase_if(open, [&](const Span& o) { return o.until <= s.start; });
    for (const Span& o : open)
      if (o.unit != s.unit)
        met.push_back(static_cast<uint64_t>(std::min(o.unit, s.unit)) << 32 | static_cast<uint32_t>(std::max(o.unit, s.unit)));
    open.push_back(s);
  }
  std::sort(met.begin(), met.end());
  met.erase(std::unique(met.begin(), met.end()), met.end());
  std::vector<std::pair<int, int>>& live = live_[thread];
  for (uint64_t pair : met) {
    const int a = static_cast<int>(pair >> 32), b = static_cast<int>(pair & 0xffffffffu);
    const int ia = unit_index_[static_cast<size_t>(a)], ib = unit_index_[static_cast<size_t>(b)];
    if (!apart_at(ia, a - infos_[static_cast<size_t>(ia)].first_unit, ib, b - infos_[static_cast<size_t>(ib)].first_unit,
                  &work_))
      live.emplace_back(a, b);
  }
  work_ += static_cast<int64_t>(met.size());
}

int RegstLifetimes::slots(int64_t regst) const {
  const int i = index(regst);
  return i < 0 ? 0 : infos_[static_cast<size_t>(i)].slots;
}

std::pair<int64_t, int> RegstLifetimes::slot_of(int unit) const {
  const Info& info = infos_[static_cast<size_t>(unit_index_[static_cast<size_t>(unit)])];
  return {info.regst, unit - info.first_unit};
}

const std::vector<std::pair<int, int>>& RegstLifetimes::live_together(uint64_t thread) const {
  static const std::vector<std::pair<int, int>> none;
  auto it = live_.find(thread);
  return it == live_.end() ? none : it->second;
}

// Whether the act of `row` precedes the start ranked `rank`: a rank after
// it, in none of its gaps.
bool RegstLifetimes::precedes(uint32_t row, uint32_t rank, int64_t* work) const {
  const Row& r = rows_[row];
  if (rank < r.after) return false;
  const Run* begin = gaps_.data() + r.first;
  const Run* end = begin + r.count;
  const Run* gap = std::upper_bound(begin, end, rank, [](uint32_t x, const Run& g) { return x < g.begin; });
  if (work != nullptr) ++*work;
  return gap == begin || (gap - 1)->end <= rank;
}

bool RegstLifetimes::before(const Production& a, const Production& b, int64_t* work) const {
  if (b.start >= a.until) return true;
  for (uint32_t k = a.first_end; k < a.first_end + a.ends; ++k)
    if (!precedes(ends_[k], b.start, work)) return false;
  return true;
}

bool RegstLifetimes::apart(int64_t a, int slot_a, int64_t b, int slot_b) const {
  return apart_at(index(a), slot_a, index(b), slot_b);
}

bool RegstLifetimes::apart_at(int a, int slot_a, int b, int slot_b, int64_t* work) const {
  if (a < 0 || b < 0 || (a == b && slot_a == slot_b)) return false;
  const Info& ia = infos_[static_cast<size_t>(a)];
  const Info& ib = infos_[static_cast<size_t>(b)];
  if (ia.thread != ib.thread || slot_a < 0 || slot_a >= ia.slots || slot_b < 0 || slot_b >= ib.slots) return false;
  // Merge the two chains: the next of either must be acked before the
  // other's next begins (both at once cannot hold: the graph has no cycle).
  // A slot's own productions follow each other (its readers ack it before
  // it is written again). The productions of two periods give every pair
  // that starts in the first and its successor, which repeat every period.
  const Production* pa = productions_.data() + ia.first_production;
  const Production* pb = productions_.data() + ib.first_production;
  const auto step_a = static_cast<uint32_t>(ia.slots), step_b = static_cast<uint32_t>(ib.slots);
  uint32_t i = static_cast<uint32_t>(slot_a), j = static_cast<uint32_t>(slot_b);
  while (i < ia.productions || j < ib.productions) {
    if (i < ia.productions && (j >= ib.productions || before(pa[i], pb[j], work))) {
      i += step_a;
    } else if (j < ib.productions && (i >= ia.productions || before(pb[j], pa[i], work))) {
      j += step_b;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace rill::compiler
