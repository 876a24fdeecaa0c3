#include "compiler/regst_lifetimes.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "base/actor_id.h"
#include "compiler/compiler.h"

namespace rill::compiler {
namespace {

constexpr int kMaxPeriod = 4;       // steps after which a regst's slots repeat, at most
constexpr size_t kChunkWords = 64;  // targets per reachability pass: 4,096

// One act of one of the node's tasks in the unrolled graph.
using Event = uint32_t;

struct TaskActs {
  const plan::Task* task = nullptr;
  int per_step = 1;  // acts a step
  Event base = 0;    // its act a is event base + a
  int acts = 0;      // acts in the unrolled steps
  bool modeled = false;
};

bool is_variable(const plan::Task& t) { return t.kind() == plan::TaskKind::Variable; }

// A laned variable picks one of its port sets per act: none of the plain
// orders hold for it. A plain variable's act waits for every input (its
// gradient and, under loss scaling, the step's gate: actor/actor.cc), each
// production read by the act one on.
bool plain(const plan::Task& t) {
  if (!is_variable(t)) return true;
  return t.variable() == nullptr || t.variable()->lanes() <= 1;
}

// How a regst's productions map to acts: production n is written by the
// producer's acts [n q, n q + q) (q acts a production), and read by a
// reader's acts [n q', n q' + q'), one later for a variable (its act n + 1
// is the update after step n).
struct Reader {
  size_t task;
  int per;    // acts per production
  int shift;  // 1 for a variable
};

struct Written {
  const plan::RegstDesc* regst;
  size_t producer;
  int per;
  std::vector<Reader> readers;
  bool all_local_plain = true;  // every consumer is a plain task of this node
};

}  // namespace

RegstLifetimes RegstLifetimes::analyze(const plan::Plan& plan, int node) {
  RegstLifetimes out;
  if (plan.tasks() == nullptr || plan.regsts() == nullptr) return out;
  std::vector<TaskActs> acts;
  std::unordered_map<uint64_t, size_t> local;  // actor id -> index in acts
  for (const plan::Task* t : *plan.tasks()) {
    if (t->node() != node) continue;
    local[t->id()] = acts.size();
    acts.push_back({t, std::max(1, t->acts_per_step()), 0, 0, plain(*t)});
  }
  auto per_production = [](const TaskActs& t, int readies) {
    return readies > 0 && t.per_step % readies == 0 ? t.per_step / readies : 0;
  };

  // The regsts written here whose orders hold, with their readers.
  std::vector<Written> written;
  for (size_t t = 0; t < acts.size(); ++t) {
    const plan::Task& task = *acts[t].task;
    if (!acts[t].modeled || task.outputs() == nullptr) continue;
    for (int64_t id : *task.outputs()) {
      const plan::RegstDesc* r = find_regst(plan, id);
      if (r == nullptr || r->producer() != task.id() || r->register_num() < 1) continue;
      const int readies = r->readies_per_step();
      Written w{r, t, per_production(acts[t], readies), {}, true};
      if (w.per == 0) continue;
      if (r->consumers() != nullptr)
        for (uint64_t c : *r->consumers()) {
          auto it = local.find(c);
          const int per = it == local.end() ? 0 : per_production(acts[it->second], readies);
          if (it == local.end() || !acts[it->second].modeled || it->second == t || per == 0) {
            w.all_local_plain = false;
            continue;
          }
          if (std::any_of(w.readers.begin(), w.readers.end(), [&](const Reader& x) { return x.task == it->second; }))
            continue;  // one task reading a regst twice (x * x) acks it once
          w.readers.push_back({it->second, per, is_variable(*acts[it->second].task) ? 1 : 0});
        }
      written.push_back(std::move(w));
    }
  }

  // Shareable regsts, by thread; the period after which every one's slots
  // repeat (slot n % register_num holds production n).
  auto period_of = [](const plan::RegstDesc& r) {
    const int readies = std::max(1, r.readies_per_step());
    return std::lcm(r.register_num(), readies) / readies;
  };
  std::map<uint64_t, std::vector<const Written*>> by_thread;
  int period = 1;
  for (const Written& w : written) {
    const plan::RegstDesc& r = *w.regst;
    const plan::Task& producer = *acts[w.producer].task;
    const int p = period_of(r);
    if (r.is_model() || r.bytes() <= 0 || producer.kind() != plan::TaskKind::Compute || !w.all_local_plain ||
        w.readers.empty() || kMaxPeriod % p != 0)
      continue;
    const uint64_t thread = ActorId::thread_key(producer.id());
    bool ok = true;
    for (const Reader& c : w.readers) {
      const plan::Task& reader = *acts[c.task].task;
      ok = ok && (reader.kind() == plan::TaskKind::Compute || is_variable(reader)) &&
           ActorId::thread_key(reader.id()) == thread;
    }
    if (!ok) continue;
    by_thread[thread].push_back(&w);
    period = std::max(period, p);  // all divide kMaxPeriod, a power of two
  }
  if (by_thread.empty()) return out;

  // The graph over 2 periods and a step (a chain's pairs from one period
  // and their successors, a variable's read one step on).
  const int checked_steps = 2 * period, steps = checked_steps + 1;
  Event events = 0;
  for (TaskActs& t : acts) {
    t.base = events;
    t.acts = t.per_step * steps;
    events += static_cast<Event>(t.acts);
  }
  auto event = [&](size_t t, int act) -> Event { return acts[t].base + static_cast<Event>(act); };
  std::vector<std::pair<Event, Event>> edges;
  for (size_t t = 0; t < acts.size(); ++t)
    if (acts[t].modeled)
      for (int a = 0; a + 1 < acts[t].acts; ++a) edges.emplace_back(event(t, a), event(t, a + 1));
  for (const Written& w : written) {
    const int productions = w.regst->readies_per_step() * steps;
    for (int n = 0; n < productions; ++n) {
      const int last_write = n * w.per + w.per - 1;
      for (const Reader& c : w.readers) {
        const int first_read = n * c.per + c.shift, last_read = first_read + c.per - 1;
        if (first_read < acts[c.task].acts) edges.emplace_back(event(w.producer, last_write), event(c.task, first_read));
        const int next = n + w.regst->register_num();  // the production that reuses this slot
        if (next < productions && last_read < acts[c.task].acts)
          edges.emplace_back(event(c.task, last_read), event(w.producer, next * w.per));
      }
    }
  }

  // Successor lists and a topological order; a cycle (a plan that could
  // not run) leaves nothing shareable.
  std::vector<uint32_t> first(events + 1, 0);
  for (const auto& [from, to] : edges) ++first[from + 1];
  for (Event e = 0; e < events; ++e) first[e + 1] += first[e];
  std::vector<Event> succ(edges.size());
  {
    std::vector<uint32_t> fill(first.begin(), first.end() - 1);
    for (const auto& [from, to] : edges) succ[fill[from]++] = to;
  }
  std::vector<uint32_t> indegree(events, 0);
  for (Event s : succ) ++indegree[s];
  std::vector<Event> order;
  order.reserve(events);
  for (Event e = 0; e < events; ++e)
    if (indegree[e] == 0) order.push_back(e);
  for (size_t i = 0; i < order.size(); ++i)
    for (uint32_t k = first[order[i]]; k < first[order[i] + 1]; ++k)
      if (--indegree[succ[k]] == 0) order.push_back(succ[k]);
  if (order.size() != events) return out;

  std::vector<uint32_t> target_of(events, UINT32_MAX), row_of(events, UINT32_MAX);
  for (const auto& [thread, regsts] : by_thread) {
    std::vector<Event> targets, rows;
    for (const Written* w : regsts) {
      const int slots = w->regst->register_num();
      Info info{thread, std::vector<std::vector<Production>>(static_cast<size_t>(slots))};
      const int checked = w->regst->readies_per_step() * checked_steps;
      for (int n = 0; n < checked; ++n) {
        Production p;
        const Event start = event(w->producer, n * w->per);
        if (target_of[start] == UINT32_MAX) {
          target_of[start] = static_cast<uint32_t>(targets.size());
          targets.push_back(start);
        }
        p.start = target_of[start];
        for (const Reader& c : w->readers) {
          const Event end = event(c.task, n * c.per + c.shift + c.per - 1);  // within the unrolled steps
          if (row_of[end] == UINT32_MAX) {
            row_of[end] = static_cast<uint32_t>(rows.size());
            rows.push_back(end);
          }
          p.ends.push_back(row_of[end]);
        }
        info.slots[static_cast<size_t>(n % slots)].push_back(std::move(p));
      }
      out.index_[w->regst->id()] = static_cast<int>(out.infos_.size());
      out.infos_.push_back(std::move(info));
    }
    // What each end event precedes, a chunk of targets at a time: the
    // union over its successors of each successor and what it precedes.
    Reach& reach = out.reach_[thread];  // unordered_map: stays where it is
    for (const Written* w : regsts) out.infos_[static_cast<size_t>(out.index_.at(w->regst->id()))].reach = &reach;
    reach.words = (targets.size() + 63) / 64;
    reach.bits.assign(rows.size() * reach.words, 0);
    for (size_t w0 = 0; w0 < reach.words; w0 += kChunkWords) {
      const size_t cw = std::min(kChunkWords, reach.words - w0);
      std::vector<uint64_t> below(static_cast<size_t>(events) * cw, 0);
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        uint64_t* mine = &below[static_cast<size_t>(*it) * cw];
        for (uint32_t k = first[*it]; k < first[*it + 1]; ++k) {
          const Event s = succ[k];
          const uint64_t* theirs = &below[static_cast<size_t>(s) * cw];
          for (size_t i = 0; i < cw; ++i) mine[i] |= theirs[i];
          const uint32_t t = target_of[s];
          if (t != UINT32_MAX && t / 64 >= w0 && t / 64 < w0 + cw) mine[t / 64 - w0] |= uint64_t{1} << (t % 64);
        }
      }
      for (size_t r = 0; r < rows.size(); ++r)
        std::copy_n(&below[static_cast<size_t>(rows[r]) * cw], cw, &reach.bits[r * reach.words + w0]);
    }
    for (Event e : targets) target_of[e] = UINT32_MAX;
    for (Event e : rows) row_of[e] = UINT32_MAX;
  }
  return out;
}

int RegstLifetimes::slots(int64_t regst) const {
  const int i = index(regst);
  return i < 0 ? 0 : static_cast<int>(infos_[static_cast<size_t>(i)].slots.size());
}

bool RegstLifetimes::before(const Reach& reach, const Production& a, const Production& b) const {
  for (uint32_t row : a.ends)
    if (!reach.precedes(row, b.start)) return false;
  return true;
}

bool RegstLifetimes::apart(int64_t a, int slot_a, int64_t b, int slot_b) const {
  return apart_at(index(a), slot_a, index(b), slot_b);
}

bool RegstLifetimes::apart_at(int a, int slot_a, int b, int slot_b) const {
  if (a < 0 || b < 0 || (a == b && slot_a == slot_b)) return false;
  const Info& ia = infos_[static_cast<size_t>(a)];
  const Info& ib = infos_[static_cast<size_t>(b)];
  if (ia.thread != ib.thread || slot_a < 0 || slot_a >= static_cast<int>(ia.slots.size()) || slot_b < 0 ||
      slot_b >= static_cast<int>(ib.slots.size()))
    return false;
  const Reach& reach = *ia.reach;
  const std::vector<Production>& pa = ia.slots[static_cast<size_t>(slot_a)];
  const std::vector<Production>& pb = ib.slots[static_cast<size_t>(slot_b)];
  // Merge the two chains: the next of either must be acked before the
  // other's next begins (both at once cannot hold: the graph has no cycle).
  // A slot's own productions follow each other (its readers ack it before
  // it is written again). The productions of two periods give every pair
  // that starts in the first and its successor, which repeat every period.
  size_t i = 0, j = 0;
  while (i < pa.size() || j < pb.size()) {
    if (i < pa.size() && (j == pb.size() || before(reach, pa[i], pb[j]))) {
      ++i;
    } else if (j < pb.size() && (i == pa.size() || before(reach, pb[j], pa[i]))) {
      ++j;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace rill::compiler
