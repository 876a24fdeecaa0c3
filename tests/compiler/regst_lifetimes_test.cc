// Regst lifetimes (compiler/regst_lifetimes.h) and the memory they let
// regsts share (compiler/memory_plan.h): what the analysis calls apart is
// never live at once in any order a worker may act in, checked against
// random schedules of an independent simulation of the actor protocol; the
// GPT sample's forward temporaries share bytes, what backward reads does
// not share with what forward makes after it; the check refuses overlaps
// of regsts that may be live together.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "base/actor_id.h"
#include "compiler/memory_plan.h"
#include "compiler/regst_lifetimes.h"
#include "graph/job_file.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using compiler::RegstLifetimes;

graph::Job sample(const std::string& file) {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/" + file);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

const plan::RegstDesc* regst_named(const plan::Plan& p, const std::string& name) {
  for (const plan::RegstDesc* r : *p.regsts())
    if (r->name() && r->name()->str() == name) return r;
  FAIL("no regst named " << name);
  return nullptr;
}

// One random run of node 0's tasks for `steps` steps under the actor
// protocol as actor/actor.h states it, written apart from the analysis:
// any actor able to act may act next. Records, per regst and production,
// the act (a global counter) that first wrote it and the one that acked it
// last. Every regst is produced and read on node 0 (one-node plans).
struct Simulated {
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> live;  // regst -> [first write, last ack] by production
};

Simulated simulate(const plan::Plan& p, int steps, std::mt19937& rng) {
  struct Port {
    int64_t regst;
    int per;  // acts per production
  };
  struct Sim {
    const plan::Task* task;
    std::vector<Port> in, out;
    int64_t acts = 0, limit = 0;
    bool variable = false;
  };
  std::vector<Sim> sims;
  std::map<int64_t, int64_t> readied;         // regst -> productions readied
  std::map<int64_t, std::vector<int>> pending;  // regst -> readers yet to ack, by production
  std::map<int64_t, int> readers, slots;
  Simulated out;
  for (const plan::Task* t : *p.tasks()) {
    Sim s{t, {}, {}, 0, 0, t->kind() == plan::TaskKind::Variable};
    const int aps = std::max(1, t->acts_per_step());
    s.limit = s.variable ? steps + 1 : int64_t{steps} * aps;
    std::set<int64_t> seen;
    for (int64_t id : *t->inputs())
      if (seen.insert(id).second) s.in.push_back({id, aps / testing::regst(p, id)->readies_per_step()});
    for (int64_t id : *t->outputs()) {
      const plan::RegstDesc* r = testing::regst(p, id);
      s.out.push_back({id, aps / r->readies_per_step()});
      std::set<uint64_t> distinct(r->consumers()->begin(), r->consumers()->end());
      readers[id] = static_cast<int>(distinct.size());
      slots[id] = r->register_num();
    }
    sims.push_back(std::move(s));
  }
  auto can_act = [&](const Sim& s) {
    if (s.acts >= s.limit) return false;
    for (const Port& in : s.in) {
      if (s.variable && s.acts == 0) break;  // the first version reads nothing
      const int64_t production = (s.acts - (s.variable ? 1 : 0)) / in.per;
      if (readied[in.regst] <= production) return false;
    }
    for (const Port& o : s.out) {
      if (s.acts % o.per != 0) continue;  // filling a slot begun already
      const int64_t reuses = s.acts / o.per - slots[o.regst];
      if (reuses >= 0 && pending[o.regst][static_cast<size_t>(reuses)] > 0) return false;
    }
    return true;
  };
  int64_t clock = 0;
  for (;;) {
    std::vector<size_t> able;
    for (size_t i = 0; i < sims.size(); ++i)
      if (can_act(sims[i])) able.push_back(i);
    if (able.empty()) break;
    Sim& s = sims[able[std::uniform_int_distribution<size_t>(0, able.size() - 1)(rng)]];
    ++clock;
    for (const Port& o : s.out) {
      const int64_t production = s.acts / o.per;
      auto& live = out.live[o.regst];
      if (s.acts % o.per == 0) live.push_back({clock, -1});
      if (s.acts % o.per == o.per - 1) {
        readied[o.regst] = production + 1;
        pending[o.regst].push_back(readers[o.regst]);
        if (readers[o.regst] == 0) live.back().second = clock;
      }
    }
    if (!(s.variable && s.acts == 0))
      for (const Port& in : s.in) {
        const int64_t read = s.acts - (s.variable ? 1 : 0);
        if (read % in.per != in.per - 1) continue;
        const size_t production = static_cast<size_t>(read / in.per);
        if (--pending[in.regst][production] == 0) out.live[in.regst][production].second = clock;
      }
    ++s.acts;
  }
  for (const Sim& s : sims) REQUIRE_MESSAGE(s.acts == s.limit, "the simulation stalled at " << s.task->name()->str());
  return out;
}

// Every pair of slots the analysis calls apart, never live at once in
// `runs` random schedules; and the analysis finds some (or the check says
// nothing). Returns the pairs found.
size_t check_apart_never_overlap(const graph::Job& job, const std::string& devices, int runs) {
  const std::string bytes = testing::compile_ok(job, devices);
  const plan::Plan& p = *testing::plan_of(bytes);
  const RegstLifetimes lifetimes = RegstLifetimes::analyze(p, 0);
  using Unit = std::pair<int64_t, int>;  // (regst, slot)
  std::vector<Unit> units;
  for (const plan::RegstDesc* r : *p.regsts())
    for (int slot = 0; slot < lifetimes.slots(r->id()); ++slot) units.push_back({r->id(), slot});
  std::vector<std::pair<Unit, Unit>> pairs;
  for (size_t i = 0; i < units.size(); ++i)
    for (size_t j = i + 1; j < units.size(); ++j)
      if (lifetimes.apart(units[i].first, units[i].second, units[j].first, units[j].second))
        pairs.emplace_back(units[i], units[j]);
  CAPTURE(devices);
  REQUIRE(!pairs.empty());
  std::mt19937 rng(7);
  for (int run = 0; run < runs; ++run) {
    const Simulated sim = simulate(p, 6, rng);
    for (const auto& [a, b] : pairs) {
      // Production n lives in slot n % register_num.
      const auto& la = sim.live.at(a.first);
      const auto& lb = sim.live.at(b.first);
      const size_t ra = static_cast<size_t>(testing::regst(p, a.first)->register_num());
      const size_t rb = static_cast<size_t>(testing::regst(p, b.first)->register_num());
      for (size_t x = static_cast<size_t>(a.second); x < la.size(); x += ra)
        for (size_t y = static_cast<size_t>(b.second); y < lb.size(); y += rb) {
          const bool overlap = la[x].first <= lb[y].second && lb[y].first <= la[x].second;
          if (overlap)
            FAIL_CHECK("regsts '" << testing::regst(p, a.first)->name()->str() << "' slot " << a.second << " and '"
                                  << testing::regst(p, b.first)->name()->str() << "' slot " << b.second
                                  << " were live at once: [" << la[x].first << ", " << la[x].second << "] and ["
                                  << lb[y].first << ", " << lb[y].second << "]");
        }
    }
  }
  return pairs.size();
}

TEST_CASE("slots called apart are never live at once in random schedules of the actor protocol") {
  SUBCASE("the GPT sample on one device") { check_apart_never_overlap(sample("samples/gpt/gpt_moby.json"), "cpu:1", 20); }
  SUBCASE("a deep MLP data parallel on two devices") {
    check_apart_never_overlap(testing::deep_mlp_job(3, 16, 8), "cpu:2", 50);
  }
  SUBCASE("the GPT sample tensor parallel on two devices") {
    check_apart_never_overlap(sample("samples/gpt/gpt_moby_tp.json"), "cpu:2", 10);
  }
  SUBCASE("the GPT sample with 4 micro-batches: regsts of two slots, gradients written over a step's acts") {
    graph::Job job = sample("samples/gpt/gpt_moby.json");
    job.train.micro_batches = 4;
    check_apart_never_overlap(job, "cpu:1", 20);
  }
  SUBCASE("the GPT sample in f16: every update reads its gradient and loss scaling's gate") {
    graph::Job job = sample("samples/gpt/gpt_moby.json");
    job.train.precision = graph::Precision::kF16;
    check_apart_never_overlap(job, "cpu:1", 20);
  }
  SUBCASE("a deep MLP with loss scaling and 4 micro-batches on two devices") {
    graph::Job job = testing::deep_mlp_job(3, 16, 8);
    job.train.micro_batches = 4;
    job.train.loss_scale = 1024;
    check_apart_never_overlap(job, "cpu:2", 50);
  }
  SUBCASE("a deep MLP as 2 pipeline stages of 4 micro-batches (1F1B: stage 0's forward holds 2 slots)") {
    graph::Job job = testing::deep_mlp_job(4, 16, 8);
    job.train.micro_batches = 4;
    job.pipeline = graph::Pipeline{};
    job.pipeline->num_stages = 2;
    check_apart_never_overlap(job, "cpu:2", 50);
  }
}

TEST_CASE("the GPT sample's forward temporaries share bytes; what backward reads does not share with later forward work") {
  const std::string bytes = testing::compile_ok(sample("samples/gpt/gpt_moby.json"), "cpu:1");
  const plan::Plan& p = *testing::plan_of(bytes);
  const RegstLifetimes lifetimes = RegstLifetimes::analyze(p, 0);
  const int64_t scores0 = regst_named(p, "h0.scores")->id(), scores1 = regst_named(p, "h1.scores")->id();
  const int64_t att0 = regst_named(p, "h0.att")->id();  // the softmax, read again by its gradient
  CHECK(lifetimes.shareable(scores0));
  CHECK(lifetimes.apart(scores0, scores1));  // read only by layer 0's softmax, done before layer 1's scores
  CHECK_FALSE(lifetimes.apart(att0, scores1));
  CHECK_FALSE(lifetimes.apart(scores0, scores0));
  // A model regst holds its variable between steps: never shared.
  for (const plan::RegstDesc* r : *p.regsts())
    if (r->is_model()) CHECK_FALSE(lifetimes.shareable(r->id()));

  auto memory = compiler::plan_memory(p, 0);
  REQUIRE(memory.ok());
  REQUIRE(memory->blocks.size() == 1);
  CHECK(compiler::check_memory_plan(p, 0, *memory).ok());
  // Measured: 105 MB planned against 363 MB of slots.
  CHECK(memory->blocks[0].slot_bytes * 3 < memory->slots_sum(0));
  const auto& m1 = memory->regsts.at(scores1);

  // Two regsts that may be live at once on the same bytes are refused; so
  // is any overlap where the plan does not reuse memory.
  compiler::MemoryPlan wrong = *memory;
  wrong.regsts.at(att0).offsets[0] = m1.offsets[0];
  Status refused = compiler::check_memory_plan(p, 0, wrong);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("may be live at once") != std::string::npos);

  graph::Job unshared = sample("samples/gpt/gpt_moby.json");
  unshared.train.reuse_memory = false;
  const std::string unshared_bytes = testing::compile_ok(unshared, "cpu:1");
  const plan::Plan& q = *testing::plan_of(unshared_bytes);
  auto separate = compiler::plan_memory(q, 0);
  REQUIRE(separate.ok());
  CHECK(separate->blocks[0].slot_bytes == separate->slots_sum(0));
  CHECK_FALSE(compiler::check_memory_plan(q, 0, *memory).ok());  // the shared layout, on a plan that reuses nothing
}

// Slots repeat every lcm(register_num, readies) / readies steps; shared
// only where that divides 4.
TEST_CASE("only regsts a compute task writes for readers of its own thread, their slots repeating soon, may share") {
  for (int64_t micro_batches : {1, 4}) {
    CAPTURE(micro_batches);
    graph::Job job = sample("samples/gpt/gpt_moby_tp.json");
    job.train.micro_batches = micro_batches;
    const std::string bytes = testing::compile_ok(job, "cpu:2");
    const plan::Plan& p = *testing::plan_of(bytes);
    const RegstLifetimes lifetimes = RegstLifetimes::analyze(p, 0);
    int shared = 0, kept = 0, several = 0;
    for (const plan::RegstDesc* r : *p.regsts()) {
      const plan::Task* producer = testing::task(p, r->producer());
      bool own_thread = r->consumers()->size() > 0;
      for (uint64_t c : *r->consumers()) {
        const plan::Task* reader = testing::task(p, c);
        own_thread = own_thread && ActorId::thread_key(c) == ActorId::thread_key(r->producer()) &&
                     (reader->kind() == plan::TaskKind::Compute || reader->kind() == plan::TaskKind::Variable);
      }
      const int readies = r->readies_per_step();
      const int period = std::lcm(r->register_num(), readies) / readies;
      const bool may = 4 % period == 0 && !r->is_model() && producer->kind() == plan::TaskKind::Compute &&
                       own_thread && r->bytes() > 0;
      CAPTURE(r->name()->str());
      if (!may) CHECK_FALSE(lifetimes.shareable(r->id()));
      if (lifetimes.shareable(r->id())) {
        CHECK(lifetimes.slots(r->id()) == r->register_num());
        ++shared;
        several += r->register_num() > 1;
      } else {
        CHECK(lifetimes.slots(r->id()) == 0);
        ++kept;
      }
    }
    CHECK(shared > 0);
    CHECK(kept > 0);  // the boxings' regsts, the models, what sources write
    if (micro_batches > 1) CHECK(several > 0);  // per micro-batch regsts of two slots
  }
}

}  // namespace
}  // namespace rill
