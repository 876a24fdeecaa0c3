// How memory planning scales (compiler/memory_plan.h,
// compiler/regst_lifetimes.h, compiler/slot_packing.h): counted work, not
// time. Planning and checking a node's memory take at most
// kWork * n * log2(n) units of the work the analysis and the packing
// count, n the node's tasks, on a chain of 50,000 identity ops, a ladder
// of 4-wide diamonds and a deep MLP data parallel on 2 devices (whose
// forward values all wait for the backward: the pairs of slots that may be
// live at once grow as the square of its layers); and ten times the ops
// take about ten times the work. (The analysis once compared every end act
// with every start, and the packing every pair of slots: the square of n.)
#include <doctest/doctest.h>

#include <cmath>

#include "compiler/memory_plan.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

// Work units per task and doubling, at most: measured 11.6 to 16.9 (the
// MLP, the chain, the ladder; a slot's productions each visit about
// 3 log2(ranks) tree nodes to be packed, as many to be placed, and again
// to be checked), with room for plans that grow a little.
constexpr double kWork = 24;

struct Planned {
  double tasks = 0;
  double work = 0;  // planning's and the check's
};

Planned plan_and_count(const graph::Job& job, const std::string& devices) {
  const std::string bytes = testing::compile_ok(job, devices);
  const plan::Plan& p = *testing::plan_of(bytes);
  Planned out;
  for (const plan::Task* t : *p.tasks()) out.tasks += t->node() == 0;
  int64_t work = 0;
  auto memory = compiler::plan_memory(p, 0, &work);
  REQUIRE(memory.ok());
  REQUIRE(compiler::check_memory_plan(p, 0, *memory, &work).ok());
  CHECK(memory->blocks[0].slot_bytes < memory->slots_sum(0));  // slots do share bytes
  out.work = static_cast<double>(work);
  return out;
}

void check_scales(const graph::Job& small, const graph::Job& large, const std::string& devices) {
  const Planned a = plan_and_count(small, devices), b = plan_and_count(large, devices);
  MESSAGE(a.tasks << " tasks: " << a.work << " units; " << b.tasks << " tasks: " << b.work << " units");
  for (const Planned& p : {a, b}) CHECK(p.work <= kWork * p.tasks * std::log2(p.tasks));
  // Linear in the tasks, give or take the log and a tenth.
  const double growth = (b.work / a.work) / (b.tasks / a.tasks);
  CHECK(growth < 1.1 * std::log2(b.tasks) / std::log2(a.tasks));
  CHECK(growth > 0.9);
}

TEST_CASE("memory planning takes near-linear work: a chain of 50,000 identity ops, and 5,000") {
  check_scales(testing::identity_chain_job(5'000), testing::identity_chain_job(50'000), "cpu:1");
}

TEST_CASE("memory planning takes near-linear work: a ladder of 4-wide diamonds, 7,000 and 70,000 ops") {
  check_scales(testing::identity_chain_job(7'000, 4), testing::identity_chain_job(70'000, 4), "cpu:1");
}

TEST_CASE("memory planning takes near-linear work: a deep MLP data parallel on 2 devices, 600 and 6,000 ops") {
  check_scales(testing::deep_mlp_job(200), testing::deep_mlp_job(2'000), "cpu:2");
}

}  // namespace
}  // namespace rill
