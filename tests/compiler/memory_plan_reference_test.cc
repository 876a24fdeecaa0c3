// The memory plan against a plain reference (compiler/regst_lifetimes.h,
// compiler/memory_plan.h): the chain test over every pair of slots, with
// what each act precedes found by bit sets over the whole unrolled graph
// (as the analysis once found it), and the packing that looks at every
// slot placed before (as it once did). On the sample jobs and a few shapes
// of its own: the same slots apart, exactly the same pairs that may be
// live at once, the same offsets and blocks.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "compiler/memory_plan.h"
#include "compiler/regst_lifetimes.h"
#include "compiler/unrolled_acts.h"
#include "graph/job_file.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using compiler::RegstLifetimes;
using compiler::UnrolledActs;

// The definition, pair by pair.
class Reference {
 public:
  explicit Reference(const UnrolledActs& acts) : acts_(acts) {
    for (size_t i = 0; i < acts.shared.size(); ++i) by_regst_[acts.shared[i].regst->id()] = i;
    for (const UnrolledActs::Shared& s : acts.shared) reach_of(s.thread);
  }

  bool shareable(int64_t regst) const { return by_regst_.contains(regst); }

  // Whether two slots' productions form one chain.
  bool apart(int64_t a, int slot_a, int64_t b, int slot_b) const {
    if (a == b && slot_a == slot_b) return false;
    const UnrolledActs::Shared& sa = acts_.shared[by_regst_.at(a)];
    const UnrolledActs::Shared& sb = acts_.shared[by_regst_.at(b)];
    if (sa.thread != sb.thread) return false;
    const Reach& reach = reach_.at(sa.thread);
    const size_t ra = static_cast<size_t>(sa.regst->register_num()), rb = static_cast<size_t>(sb.regst->register_num());
    size_t i = static_cast<size_t>(slot_a), j = static_cast<size_t>(slot_b);
    while (i < sa.productions.size() || j < sb.productions.size()) {
      if (i < sa.productions.size() &&
          (j >= sb.productions.size() || reach.before(sa.productions[i], sb.productions[j]))) {
        i += ra;
      } else if (j < sb.productions.size() &&
                 (i >= sa.productions.size() || reach.before(sb.productions[j], sa.productions[i]))) {
        j += rb;
      } else {
        return false;
      }
    }
    return true;
  }

 private:
  // For every act, the starts of one thread's productions it precedes.
  struct Reach {
    std::map<UnrolledActs::Event, size_t> target;  // start -> bit
    size_t words = 0;
    std::vector<uint64_t> bits;  // events x words
    bool precedes(UnrolledActs::Event e, UnrolledActs::Event start) const {
      const size_t t = target.at(start);
      return (bits[e * words + t / 64] >> (t % 64)) & 1;
    }
    bool before(const UnrolledActs::Production& a, const UnrolledActs::Production& b) const {
      return std::all_of(a.ends.begin(), a.ends.end(), [&](UnrolledActs::Event e) { return precedes(e, b.start); });
    }
  };

  void reach_of(uint64_t thread) {
    if (reach_.contains(thread)) return;
    Reach& reach = reach_[thread];
    for (const UnrolledActs::Shared& s : acts_.shared)
      if (s.thread == thread)
        for (const UnrolledActs::Production& p : s.productions) reach.target.emplace(p.start, 0);
    size_t bit = 0;
    for (auto& [start, t] : reach.target) t = bit++;
    reach.words = (bit + 63) / 64;
    reach.bits.assign(acts_.events * reach.words, 0);
    for (auto it = acts_.order.rbegin(); it != acts_.order.rend(); ++it) {
      uint64_t* mine = &reach.bits[*it * reach.words];
      for (uint32_t k = acts_.first[*it]; k < acts_.first[*it + 1]; ++k) {
        const UnrolledActs::Event s = acts_.succ[k];
        for (size_t w = 0; w < reach.words; ++w) mine[w] |= reach.bits[s * reach.words + w];
        if (auto t = reach.target.find(s); t != reach.target.end()) mine[t->second / 64] |= uint64_t{1} << (t->second % 64);
      }
    }
  }

  const UnrolledActs& acts_;
  std::map<int64_t, size_t> by_regst_;
  std::map<uint64_t, Reach> reach_;
};

using Unit = std::pair<int64_t, int>;  // (regst, slot)

// Whether a start of one unit's productions falls in live() of one of
// the other's (compiler/regst_lifetimes.h).
bool may_be_live(const RegstLifetimes& lifetimes, int a, int b) {
  auto falls = [&](int x, int y) {
    for (int i = 0; i < lifetimes.productions(x); ++i)
      for (const RegstLifetimes::Run& run : lifetimes.production(x, i).runs)
        for (int j = 0; j < lifetimes.productions(y); ++j) {
          const uint32_t start = lifetimes.production(y, j).start;
          if (run.begin <= start && start < run.end) return true;
        }
    return false;
  };
  return falls(a, b) || falls(b, a);
}

// The lifetimes agree with the reference on every pair of slots of a
// thread: apart, and whether a start falls in the other's live().
void check_pairs(const RegstLifetimes& lifetimes, const Reference& reference, const std::vector<Unit>& units) {
  for (size_t i = 0; i < units.size(); ++i)
    for (size_t j = i + 1; j < units.size(); ++j) {
      const auto& [a, sa] = units[i];
      const auto& [b, sb] = units[j];
      if (lifetimes.thread_of(a) != lifetimes.thread_of(b)) continue;
      const bool apart = reference.apart(a, sa, b, sb);
      const bool live = may_be_live(lifetimes, lifetimes.unit(lifetimes.index(a), sa), lifetimes.unit(lifetimes.index(b), sb));
      if (lifetimes.apart(a, sa, b, sb) != apart || live == apart)
        FAIL_CHECK("regsts " << a << " (slot " << sa << ") and " << b << " (slot " << sb << "): apart " << apart
                             << " by the reference");
    }
}

// Block `block`'s slots as the packing once placed them: the unshared
// ones first, then each thread's, largest first, each at the lowest offset
// clear of every one placed before that is not apart from it.
void check_packing(const compiler::MemoryPlan& memory, int block, const RegstLifetimes& lifetimes,
                   const Reference& reference) {
  int64_t base = 0;
  std::map<uint64_t, std::vector<std::pair<int64_t, Unit>>> by_thread;  // (-size, unit)
  for (const auto& [id, m] : memory.regsts) {
    if (m.block != block) continue;
    if (!reference.shareable(id)) {
      base += m.slot_size * m.slots;
      continue;
    }
    for (int slot = 0; slot < m.slots; ++slot) by_thread[lifetimes.thread_of(id)].push_back({-m.slot_size, {id, slot}});
  }
  for (auto& [thread, units] : by_thread) {
    std::sort(units.begin(), units.end());
    std::vector<std::pair<int64_t, int64_t>> placed;  // [begin, end) from the group's start
    int64_t extent = 0;
    for (const auto& [minus_size, unit] : units) {
      std::vector<std::pair<int64_t, int64_t>> taken;
      for (size_t k = 0; k < placed.size(); ++k)
        if (!reference.apart(unit.first, unit.second, units[k].second.first, units[k].second.second))
          taken.push_back(placed[k]);
      std::sort(taken.begin(), taken.end());
      int64_t at = 0;
      for (const auto& [begin, end] : taken) {
        if (begin >= at - minus_size) break;
        at = std::max(at, end);
      }
      placed.push_back({at, at - minus_size});
      extent = std::max(extent, at - minus_size);
      if (memory.regsts.at(unit.first).offsets[static_cast<size_t>(unit.second)] != base + at)
        FAIL_CHECK("regst " << unit.first << " slot " << unit.second << " at "
                            << memory.regsts.at(unit.first).offsets[static_cast<size_t>(unit.second)] << ", "
                            << base + at << " by the reference");
    }
    base += extent;
  }
  CHECK(memory.blocks[static_cast<size_t>(block)].slot_bytes == base);
}

// Every node of the job's plan against the reference.
void check_job(const graph::Job& job, const std::string& devices, int nodes = 1) {
  CAPTURE(job.name);
  CAPTURE(devices);
  const std::string bytes = testing::compile_ok(job, devices, {}, nodes);
  const plan::Plan& p = *testing::plan_of(bytes);
  size_t shared = 0;
  for (int node = 0; node < nodes; ++node) {
    CAPTURE(node);
    const UnrolledActs acts = compiler::unroll_acts(p, node);
    const Reference reference(acts);
    const RegstLifetimes lifetimes = RegstLifetimes::analyze(p, node);
    std::vector<Unit> units;
    for (const plan::RegstDesc* r : *p.regsts()) {
      if (lifetimes.shareable(r->id()) != reference.shareable(r->id())) FAIL_CHECK("regst " << r->id() << " shared by one");
      for (int slot = 0; slot < lifetimes.slots(r->id()); ++slot) units.push_back({r->id(), slot});
    }
    CHECK(static_cast<int>(units.size()) == lifetimes.units());
    shared += units.size();
    check_pairs(lifetimes, reference, units);
    auto memory = compiler::plan_memory(p, node);
    REQUIRE(memory.ok());
    CHECK(compiler::check_memory_plan(p, node, *memory).ok());
    for (int block = 0; block < static_cast<int>(memory->blocks.size()); ++block) check_packing(*memory, block, lifetimes, reference);
  }
  CHECK(shared > 0);
}

graph::Job sample(const std::string& file) {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/samples/" + file);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

TEST_CASE("the lifetimes and the packing give what the test over every pair gives, on the samples") {
  SUBCASE("GPT") {
    check_job(sample("gpt/gpt_moby.json"), "cpu:1");
    check_job(sample("gpt/gpt_moby_tp.json"), "cpu:2");
    check_job(sample("gpt/gpt_moby_hybrid.json"), "cpu:2", 2);
  }
  SUBCASE("GPT with 4 micro-batches, and in f16") {
    graph::Job job = sample("gpt/gpt_moby.json");
    job.train.micro_batches = 4;
    check_job(job, "cpu:1");
    job = sample("gpt/gpt_moby.json");
    job.train.precision = graph::Precision::kF16;
    check_job(job, "cpu:1");
  }
  SUBCASE("MLP: data and model parallel, pipeline stages") {
    check_job(sample("mlp/mlp.json"), "cpu:2");
    check_job(sample("mlp/mlp_model_parallel.json"), "cpu:2", 2);
    check_job(sample("mlp/mlp_pipeline.json"), "cpu:2", 2);
    check_job(sample("mlp/mlp_stages.json"), "cpu:1", 3);
  }
  SUBCASE("a deep MLP as 2 1F1B stages of 4 micro-batches, with loss scaling") {
    graph::Job job = testing::deep_mlp_job(4, 16, 8);
    job.train.micro_batches = 4;
    job.train.loss_scale = 1024;
    job.pipeline = graph::Pipeline{};
    job.pipeline->num_stages = 2;
    check_job(job, "cpu:2");
  }
  SUBCASE("chains of identities, one and four wide") {
    check_job(testing::identity_chain_job(200), "cpu:1");
    check_job(testing::identity_chain_job(200, 4), "cpu:2");
  }
}

}  // namespace
}  // namespace rill
