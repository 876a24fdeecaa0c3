#include "compiler/regst_lifetimes.h"

#include <algorithm>

#include "compiler/unrolled_acts.h"

namespace rill::compiler {

// One thread's pass: ranks its productions' starts in the order, finds
// for every act the later starts it does not precede, and records the
// thread's productions with their live() runs.
class RegstLifetimes::ThreadPass {
 public:
  ThreadPass(const UnrolledActs& acts, RegstLifetimes& out)
      : acts_(acts), out_(out), rank_(acts.events, kNone), after_(acts.events),
        first_(acts.events), count_(acts.events, 0) {}

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
    out_.ranks_[acts_.shared[begin].thread] = seen;
  }

  // The starts placed before `e` (not counting e itself).
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

  // The thread's regsts and their productions.
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
      for (const UnrolledActs::Production& p : shared.productions) out_.productions_.push_back(live(p));
    }
  }

  // live(p): from its start to each end's place, and each end's gaps.
  Production live(const UnrolledActs::Production& p) {
    Production q;
    q.start = rank_[p.start];
    runs_.clear();
    for (Event e : p.ends) {
      runs_.push_back({q.start, after_[e]});
      runs_.insert(runs_.end(), arena_.begin() + first_[e], arena_.begin() + first_[e] + count_[e]);
    }
    std::sort(runs_.begin(), runs_.end(), [](const Run& a, const Run& b) { return a.begin < b.begin; });
    q.first_run = static_cast<uint32_t>(out_.runs_.size());
    for (const Run& r : runs_) {
      if (out_.runs_.size() > q.first_run && out_.runs_.back().end >= r.begin)
        out_.runs_.back().end = std::max(out_.runs_.back().end, r.end);
      else
        out_.runs_.push_back(r);
    }
    q.runs = static_cast<uint32_t>(out_.runs_.size()) - q.first_run;
    out_.work_ += static_cast<int64_t>(runs_.size());
    return q;
  }

  // Ready for the next thread.
  void clear() {
    for (uint32_t at = lo_; at <= hi_; ++at) {
      const Event e = acts_.order[at];
      rank_[e] = kNone;
      count_[e] = 0;
    }
    arena_.clear();
  }

  const UnrolledActs& acts_;
  RegstLifetimes& out_;
  std::vector<uint32_t> rank_, after_, first_, count_;  // by event
  std::vector<Run> arena_, gaps_, unless_, both_, runs_;
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
    pass.run(begin, end);
    begin = end;
  }
  return out;
}

int RegstLifetimes::slots(int64_t regst) const {
  const int i = index(regst);
  return i < 0 ? 0 : infos_[static_cast<size_t>(i)].slots;
}

std::pair<int64_t, int> RegstLifetimes::slot_of(int unit) const {
  const Info& info = infos_[static_cast<size_t>(unit_index_[static_cast<size_t>(unit)])];
  return {info.regst, unit - info.first_unit};
}

uint32_t RegstLifetimes::ranks(uint64_t thread) const {
  auto it = ranks_.find(thread);
  return it == ranks_.end() ? 0 : it->second;
}

int RegstLifetimes::productions(int unit) const {
  const Info& info = infos_[static_cast<size_t>(unit_index_[static_cast<size_t>(unit)])];
  const auto slot = static_cast<uint32_t>(unit - info.first_unit), slots = static_cast<uint32_t>(info.slots);
  return static_cast<int>((info.productions - slot + slots - 1) / slots);
}

RegstLifetimes::Live RegstLifetimes::production(int unit, int k) const {
  const Info& info = infos_[static_cast<size_t>(unit_index_[static_cast<size_t>(unit)])];
  const Production& p =
      productions_[info.first_production + static_cast<uint32_t>(unit - info.first_unit + k * info.slots)];
  return {p.start, std::span<const Run>(runs_.data() + p.first_run, p.runs)};
}

// Whether b's start is ranked at or after a's, outside live(a): every
// reader's last read of a precedes it.
bool RegstLifetimes::before(const Production& a, const Production& b) const {
  if (b.start < a.start) return false;
  const Run* begin = runs_.data() + a.first_run;
  const Run* end = begin + a.runs;
  const Run* run = std::upper_bound(begin, end, b.start, [](uint32_t x, const Run& r) { return x < r.begin; });
  return run == begin || (run - 1)->end <= b.start;
}

bool RegstLifetimes::apart(int64_t a, int slot_a, int64_t b, int slot_b) const {
  return apart_at(index(a), slot_a, index(b), slot_b);
}

bool RegstLifetimes::apart_at(int a, int slot_a, int b, int slot_b) const {
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
    if (i < ia.productions && (j >= ib.productions || before(pa[i], pb[j]))) {
      i += step_a;
    } else if (j < ib.productions && (i >= ia.productions || before(pb[j], pa[i]))) {
      j += step_b;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace rill::compiler
