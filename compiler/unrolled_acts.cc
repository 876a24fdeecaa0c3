#include "compiler/unrolled_acts.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <queue>
#include <unordered_map>
#include <utility>

#include "base/actor_id.h"
#include "compiler/compiler.h"

namespace rill::compiler {
namespace {

using Event = UnrolledActs::Event;

constexpr int kMaxPeriod = 4;  // steps after which a regst's slots repeat, at most

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

int per_production(const TaskActs& t, int readies) {
  return readies > 0 && t.per_step % readies == 0 ? t.per_step / readies : 0;
}

// The regsts written here whose orders hold, with their readers.
std::vector<Written> written_regsts(const plan::Plan& plan, const std::vector<TaskActs>& acts,
                                    const std::unordered_map<uint64_t, size_t>& local) {
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
  return written;
}

// The period after which a regst's slots repeat (slot n % register_num
// holds production n).
int period_of(const plan::RegstDesc& r) {
  const int readies = std::max(1, r.readies_per_step());
  return std::lcm(r.register_num(), readies) / readies;
}

// Shareable regsts by thread: written by a compute task, read only by
// compute or variable tasks of its thread, slots repeating within kMaxPeriod.
std::map<uint64_t, std::vector<const Written*>> shareable_by_thread(const std::vector<Written>& written,
                                                                    const std::vector<TaskActs>& acts) {
  std::map<uint64_t, std::vector<const Written*>> by_thread;
  for (const Written& w : written) {
    const plan::RegstDesc& r = *w.regst;
    const plan::Task& producer = *acts[w.producer].task;
    if (r.is_model() || r.bytes() <= 0 || producer.kind() != plan::TaskKind::Compute || !w.all_local_plain ||
        w.readers.empty() || kMaxPeriod % period_of(r) != 0)
      continue;
    const uint64_t thread = ActorId::thread_key(producer.id());
    bool ok = true;
    for (const Reader& c : w.readers) {
      const plan::Task& reader = *acts[c.task].task;
      ok = ok && (reader.kind() == plan::TaskKind::Compute || is_variable(reader)) &&
           ActorId::thread_key(reader.id()) == thread;
    }
    if (ok) by_thread[thread].push_back(&w);
  }
  return by_thread;
}

// The orders over the unrolled steps: each task's acts in turn, a read
// after the production's last write, a slot's next write after its
// readers' last reads.
std::vector<std::pair<Event, Event>> orders(const std::vector<TaskActs>& acts, const std::vector<Written>& written,
                                            int steps) {
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
  return edges;
}

// Successor lists, and a topological order that takes, of the acts able to
// go, the earliest step's, then the earliest task's; empty on a cycle.
void link(const std::vector<std::pair<Event, Event>>& edges, const std::vector<TaskActs>& acts, UnrolledActs& out) {
  const Event events = out.events;
  out.first.assign(events + 1, 0);
  for (const auto& [from, to] : edges) ++out.first[from + 1];
  for (Event e = 0; e < events; ++e) out.first[e + 1] += out.first[e];
  out.succ.resize(edges.size());
  std::vector<uint32_t> fill(out.first.begin(), out.first.end() - 1);
  for (const auto& [from, to] : edges) out.succ[fill[from]++] = to;
  std::vector<uint32_t> task_of(events);
  for (uint32_t t = 0; t < acts.size(); ++t)
    std::fill_n(task_of.begin() + acts[t].base, acts[t].acts, t);
  auto key = [&](Event e) {
    const TaskActs& t = acts[task_of[e]];
    return (static_cast<uint64_t>((e - t.base) / static_cast<uint32_t>(t.per_step)) << 32) | task_of[e];
  };
  std::vector<uint32_t> indegree(events, 0);
  for (Event s : out.succ) ++indegree[s];
  using Ready = std::pair<uint64_t, Event>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  for (Event e = 0; e < events; ++e)
    if (indegree[e] == 0) ready.emplace(key(e), e);
  out.order.reserve(events);
  while (!ready.empty()) {
    const Event e = ready.top().second;
    ready.pop();
    out.order.push_back(e);
    for (uint32_t k = out.first[e]; k < out.first[e + 1]; ++k)
      if (--indegree[out.succ[k]] == 0) ready.emplace(key(out.succ[k]), out.succ[k]);
  }
  if (out.order.size() != events) out.order.clear();
}

}  // namespace

UnrolledActs unroll_acts(const plan::Plan& plan, int node) {
  UnrolledActs out;
  if (plan.tasks() == nullptr || plan.regsts() == nullptr) return out;
  std::vector<TaskActs> acts;
  std::unordered_map<uint64_t, size_t> local;  // actor id -> index in acts
  for (const plan::Task* t : *plan.tasks()) {
    if (t->node() != node) continue;
    local[t->id()] = acts.size();
    acts.push_back({t, std::max(1, t->acts_per_step()), 0, 0, plain(*t)});
  }
  const std::vector<Written> written = written_regsts(plan, acts, local);
  const std::map<uint64_t, std::vector<const Written*>> by_thread = shareable_by_thread(written, acts);
  if (by_thread.empty()) return out;
  int period = 1;
  for (const auto& [thread, regsts] : by_thread)
    for (const Written* w : regsts) period = std::max(period, period_of(*w->regst));  // all divide kMaxPeriod

  // The graph over 2 periods and a step (a chain's pairs from one period
  // and their successors, a variable's read one step on).
  const int checked_steps = 2 * period, steps = checked_steps + 1;
  for (TaskActs& t : acts) {
    t.base = out.events;
    t.acts = t.per_step * steps;
    out.events += static_cast<Event>(t.acts);
  }
  link(orders(acts, written, steps), acts, out);
  if (out.order.empty()) return out;

  auto event = [&](size_t t, int act) -> Event { return acts[t].base + static_cast<Event>(act); };
  for (const auto& [thread, regsts] : by_thread)
    for (const Written* w : regsts) {
      UnrolledActs::Shared shared{w->regst, thread, {}};
      const int checked = w->regst->readies_per_step() * checked_steps;
      for (int n = 0; n < checked; ++n) {
        UnrolledActs::Production p{event(w->producer, n * w->per), {}};
        for (const Reader& c : w->readers)
          p.ends.push_back(event(c.task, n * c.per + c.shift + c.per - 1));  // within the unrolled steps
        shared.productions.push_back(std::move(p));
      }
      out.shared.push_back(std::move(shared));
    }
  return out;
}

}  // namespace rill::compiler
