// Device collectives (train.nccl): a P -> B (and a P -> S(0) or S(0) -> B of
// evenly split rows) on one axis of the hierarchy (all devices, a node's,
// or a lane) becomes one task per device, on that device's thread, reading
// and writing its memory,
// one rank of a communicator the plan lists (Plan.comm_groups) with its calls
// in one order; each device thread's collective tasks are chained in that
// order, and every node's plan carries the same communicators and order.
// The plans are built where nvcc is (a build without CUDA refuses cuda
// devices); verify_plan's checks of communicators everywhere.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compiler/boxing_task.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

// A plan of no tasks on 2 nodes whose one communicator has these ranks.
std::string plan_with_group(const std::vector<int32_t>& nodes, const std::vector<int32_t>& devices) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<plan::Task>> tasks;
  std::vector<flatbuffers::Offset<plan::RegstDesc>> regsts;
  std::vector<flatbuffers::Offset<plan::Dataset>> datasets;
  std::vector<flatbuffers::Offset<plan::CommCall>> calls;
  std::vector<flatbuffers::Offset<plan::CommGroup>> groups = {
      plan::CreateCommGroupDirect(b, &nodes, &devices, &calls, true)};
  plan::FinishPlanBuffer(
      b, plan::CreatePlanDirect(b, compiler::kPlanVersion, "job", 1, 1, 1, /*num_nodes=*/2, 2, &datasets, &tasks,
                                &regsts, /*node=*/-1, /*num_tasks=*/0, nullptr, /*micro_batches=*/1, "1f1b", 1, false,
                                true, true, &groups));
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

TEST_CASE("verify_plan holds communicators to distinct devices, node-major, as many on each node") {
  CHECK(compiler::verify_plan(plan_with_group({0, 0, 1, 1}, {0, 1, 0, 1})).ok());
  struct Bad {
    std::vector<int32_t> nodes, devices;
    const char* says;
  };
  for (const Bad& bad : {Bad{{0, 0}, {1, 1}, "names one device twice"},
                         Bad{{1, 1, 0, 0}, {0, 1, 0, 1}, "not node-major"},
                         Bad{{0, 1, 0, 1}, {0, 0, 1, 1}, "not node-major"},
                         Bad{{0, 0, 0, 1}, {0, 1, 2, 0}, "as many on each node"},
                         Bad{{0, 2}, {0, 0}, "outside the plan's 2 nodes"},
                         Bad{{0}, {0}, "has 1 ranks"}}) {
    auto r = compiler::verify_plan(plan_with_group(bad.nodes, bad.devices));
    REQUIRE_FALSE(r.ok());
    INFO(r.status().to_string());
    CHECK(r.status().code() == Code::kDataLoss);
    CHECK(r.status().message().find(bad.says) != std::string::npos);
  }
}

#ifdef RILL_WITH_CUDA

using testing::compile_ok;
using testing::plan_of;
using testing::tasks_of_kind;

graph::Job with_nccl(graph::Job job, int64_t bucket_bytes = int64_t{25} << 20) {
  job.train.nccl = true;
  job.train.bucket_bytes = bucket_bytes;
  return job;
}

bool device_collective(const plan::Task* t) {
  return t->kind() == plan::TaskKind::Boxing && t->boxing()->comm_group() >= 0;
}

// The communicators as text: ranks, then each call's name, tag and size.
std::string groups_text(const plan::Plan& p) {
  std::string text;
  if (p.comm_groups() == nullptr) return text;
  for (const plan::CommGroup* g : *p.comm_groups()) {
    text += "group";
    for (uint32_t r = 0; r < g->nodes()->size(); ++r)
      text += fmt::format(" {}:{}", g->nodes()->Get(r), g->devices()->Get(r));
    text += "\n";
    for (const plan::CommCall* c : *g->calls())
      text += fmt::format("  {} {} {} {} {}\n", c->name()->str(), c->tag(), c->op()->str(), c->tensors(), c->bytes());
  }
  return text;
}

// What a plan's device collectives must be: each a rank of its group on its
// own device, its pieces in that device's memory; its peers the group's
// tasks in rank order; each device thread's collectives in the order of
// their groups' calls, each after the one before it (a control regst).
// Returns how many there are.
int check_device_collectives(const plan::Plan& p) {
  REQUIRE(p.comm_groups() != nullptr);
  std::map<uint64_t, std::vector<const plan::Task*>> by_thread;
  int count = 0;
  for (const plan::Task* t : *p.tasks()) {
    if (!device_collective(t)) continue;
    ++count;
    CAPTURE(t->name()->str());
    const plan::BoxingConf& b = *t->boxing();
    const plan::CommGroup& g = *p.comm_groups()->Get(static_cast<uint32_t>(b.comm_group()));
    const auto rank = static_cast<uint32_t>(b.first_rank());
    REQUIRE(rank < g.nodes()->size());
    CHECK(ActorId::device_type(t->id()) == DeviceType::kCuda);
    CHECK(g.nodes()->Get(rank) == t->node());
    CHECK(g.devices()->Get(rank) == t->device());
    CHECK(b.num_nodes() == static_cast<int>(g.nodes()->size()));
    REQUIRE(b.peers() != nullptr);
    CHECK(b.peers()->size() == g.nodes()->size());
    CHECK(b.peers()->Get(rank) == t->id());
    for (uint32_t k = 0; k < static_cast<uint32_t>(b.tensors()); ++k) {
      CHECK(compiler::find_regst(p, t->inputs()->Get(k))->device() == t->device());
      CHECK(compiler::find_regst(p, t->outputs()->Get(k))->device() == t->device());
    }
    by_thread[t->thread()].push_back(t);
  }
  for (const auto& [thread, tasks] : by_thread) {
    // Per group, this thread's tags in task order are the group's calls' tags.
    std::map<int, std::vector<int64_t>> tags;
    for (const plan::Task* t : tasks) tags[t->boxing()->comm_group()].push_back(t->boxing()->collective_tag());
    for (const auto& [group, seen] : tags) {
      std::vector<int64_t> calls;
      for (const plan::CommCall* c : *p.comm_groups()->Get(static_cast<uint32_t>(group))->calls())
        calls.push_back(c->tag());
      CHECK(seen == calls);
    }
    // Each reads a control regst the one before it writes.
    for (size_t i = 1; i < tasks.size(); ++i) {
      CAPTURE(tasks[i]->name()->str());
      bool after = false;
      for (int64_t r : *tasks[i]->inputs()) after = after || compiler::find_regst(p, r)->producer() == tasks[i - 1]->id();
      CHECK(after);
    }
  }
  return count;
}

// Each of `nodes` nodes' plans of `job`, compiled alone (as its agent does)
// and cut from `whole`, has `whole`'s communicators and calls in its order.
// Returns each node's own plan's device collectives.
std::vector<int> alike_node_by_node(const graph::Job& job, const std::string& devices, int nodes,
                                    const std::string& whole) {
  const std::string order = groups_text(*plan_of(whole));
  auto cluster = compiler::parse_devices(devices, nodes);
  REQUIRE(cluster.ok());
  std::vector<int> counts;
  for (int node = 0; node < nodes; ++node) {
    CAPTURE(node);
    compiler::CompileOptions alone;
    alone.node = node;
    auto own = compiler::compile(job, *cluster, alone);
    REQUIRE(own.ok());
    auto cut = compiler::node_plan(whole, node);
    REQUIRE(cut.ok());
    CHECK(groups_text(*plan_of(*own)) == order);
    CHECK(groups_text(*plan_of(*cut)) == order);
    counts.push_back(check_device_collectives(*plan_of(*own)));
  }
  return counts;
}

TEST_CASE("train.nccl on cuda:2: gradients all-reduced in device memory, one task per device, in one order") {
  const plan::Plan* p = nullptr;
  const std::string host = compile_ok(testing::mlp_job(), "cuda:2");
  const std::string nccl = compile_ok(with_nccl(testing::mlp_job()), "cuda:2");
  p = plan_of(nccl);
  // Every boxing is a device collective: nothing crosses through the host
  // but the batches in and the loss out.
  for (const plan::Task* t : tasks_of_kind(*p, plan::TaskKind::Boxing)) {
    CAPTURE(t->name()->str());
    CHECK(device_collective(t));
  }
  CHECK(tasks_of_kind(*p, plan::TaskKind::Copy).size() < tasks_of_kind(*plan_of(host), plan::TaskKind::Copy).size());
  CHECK(plan_of(host)->comm_groups() == nullptr);
  REQUIRE(p->comm_groups() != nullptr);
  REQUIRE(p->comm_groups()->size() == 1);
  CHECK(groups_text(*p).starts_with("group 0:0 0:1\n"));
  // The small gradients share one bucket: one call of every variable's gradient.
  const auto* calls = p->comm_groups()->Get(0)->calls();
  REQUIRE(calls->size() == 1);
  const size_t variables = tasks_of_kind(*p, plan::TaskKind::Variable).size() / 2;
  CHECK(static_cast<size_t>(calls->Get(0)->tensors()) == variables);
  CHECK(check_device_collectives(*p) == 2);

  // Without buckets, a call per gradient, chained in one order on both devices.
  const std::string apart = compile_ok(with_nccl(testing::mlp_job(), 0), "cuda:2");
  CHECK(plan_of(apart)->comm_groups()->Get(0)->calls()->size() == variables);
  CHECK(check_device_collectives(*plan_of(apart)) == static_cast<int>(2 * variables));
  // rill plan --json says it.
  const auto json = nlohmann::json::parse(compiler::plan_json(*plan_of(apart)));
  REQUIRE(json["comm_groups"].size() == 1);
  CHECK(json["comm_groups"][0]["backend"] == "nccl");
  CHECK(json["comm_groups"][0]["ranks"].size() == 2);
  CHECK(json["comm_groups"][0]["calls"].size() == variables);
  int nccl_tasks = 0;
  for (const auto& t : json["tasks"])
    if (t.contains("boxing") && t["boxing"].value("transport", "") == "nccl") ++nccl_tasks;
  CHECK(nccl_tasks == static_cast<int>(2 * variables));
}

TEST_CASE("train.nccl on cuda:8 and 4 nodes x cuda:8: every node's plan has the same communicators in one order") {
  CHECK(check_device_collectives(*plan_of(compile_ok(with_nccl(testing::mlp_job(16, 16), 0), "cuda:8"))) > 0);
  const graph::Job job = with_nccl(testing::mlp_job(64, 64), 0);
  const std::string whole = compile_ok(job, "cuda:8", {}, 4);  // and node by node
  CHECK(groups_text(*plan_of(whole)).starts_with("group 0:0 0:1 0:2 0:3 0:4 0:5 0:6 0:7 1:0"));
  CHECK(check_device_collectives(*plan_of(whole)) > 0);
  // This node's 8 device threads each hold one rank of every call.
  for (const int own : alike_node_by_node(job, "cuda:8", 4, whole))
    CHECK(own == 8 * static_cast<int>(plan_of(whole)->comm_groups()->Get(0)->calls()->size()));
}

TEST_CASE("train.nccl with train.zero: weights gathered and gradients reduce-scattered by device collectives") {
  for (const auto& [nodes, devices] : {std::pair{1, "cuda:2"}, std::pair{2, "cuda:2"}, std::pair{1, "cuda:3"}}) {
    CAPTURE(nodes);
    CAPTURE(devices);
    graph::Job job = with_nccl(testing::mlp_job(16, 16));
    job.train.zero = true;
    const std::string bytes = compile_ok(job, devices, {}, nodes);
    const plan::Plan& p = *plan_of(bytes);
    std::set<std::string> ops;
    for (const plan::CommCall* c : *p.comm_groups()->Get(0)->calls()) ops.insert(c->op()->str());
    CHECK(ops == std::set<std::string>{"all_gather", "reduce_scatter"});
    CHECK(check_device_collectives(p) > 0);
    // Each rank's block in its own GPU's memory: the gather reads one, the
    // reduce-scatter writes one.
    for (const plan::Task* t : *p.tasks()) {
      if (!device_collective(t)) continue;
      CAPTURE(t->name()->str());
      const plan::RegstDesc* in = compiler::find_regst(p, t->inputs()->Get(0));
      const plan::RegstDesc* out = compiler::find_regst(p, t->outputs()->Get(0));
      // Its block: rows split as pieces are (by node, then device), evenly
      // or not (w1's 4 rows on cuda:3: 2, 1, 1).
      const plan::RegstDesc* block = testing::sbp_string(in->sbp()) == "S(0)" ? in : out;
      const plan::RegstDesc* whole = block == in ? out : in;
      const int per_node = devices == std::string("cuda:3") ? 3 : 2;
      const int64_t rows = whole->shape()->Get(0);
      CHECK(block->shape()->Get(0) == piece_region({rows}, NdSbp(Sbp::split(0)), nodes, per_node,
                                                   t->boxing()->first_rank())
                                          .extent[0]);
    }
  }
  // Every gradient and weight of the MLP on cuda:3, rows dividing or not, is
  // a device collective's.
  graph::Job job = with_nccl(testing::mlp_job(16, 16));
  job.train.zero = true;
  const std::string three = compile_ok(job, "cuda:3");
  for (const plan::Task* t : tasks_of_kind(*plan_of(three), plan::TaskKind::Boxing)) {
    CAPTURE(t->name()->str());
    CHECK(device_collective(t));
  }
}

TEST_CASE("train.nccl with tensor parallel GPT on cuda:2: forward and backward all-reduces are device collectives") {
  const std::string bytes = compile_ok(with_nccl(testing::gpt_sample("gpt_moby_tp.json")), "cuda:2");
  const plan::Plan& p = *plan_of(bytes);
  const int count = check_device_collectives(p);
  // Two all-reduces a layer forward (attention and MLP projections), their
  // input gradients' in backward, and the gradients' buckets.
  CHECK(count > 2 * 4 * 2);
}

// The ranks of communicator `g` as "node:device ...".
std::string ranks_text(const plan::CommGroup& g) {
  std::string text;
  for (uint32_t r = 0; r < g.nodes()->size(); ++r)
    text += fmt::format("{}{}:{}", r ? " " : "", g.nodes()->Get(r), g.devices()->Get(r));
  return text;
}

TEST_CASE("train.nccl with 2-D SBP: a node's devices and each lane are communicators of their own") {
  const graph::Job job = with_nccl(testing::gpt_sample("gpt_moby_hybrid.json"));
  const std::string bytes = compile_ok(job, "cuda:2", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  CHECK(check_device_collectives(p) > 0);
  std::set<std::string> groups;
  for (const plan::CommGroup* g : *p.comm_groups()) groups.insert(ranks_text(*g));
  // Each node's devices, each lane (device d of every node), and all four.
  CHECK(groups == std::set<std::string>{"0:0 0:1", "1:0 1:1", "0:0 1:0", "0:1 1:1", "0:0 0:1 1:0 1:1"});
  // Every boxing that one collective on one axis does is a device
  // collective, on that axis's communicator (all-to-all included).
  // The rest (slices, B -> P, S -> P) each device makes from its own piece
  // on its thread: no boxing runs on a comm thread through host memory.
  int per_scope[3] = {0, 0, 0}, own = 0;
  for (const plan::Task* t : tasks_of_kind(p, plan::TaskKind::Boxing)) {
    CAPTURE(t->name()->str());
    const plan::BoxingConf& b = *t->boxing();
    if (b.origins() != nullptr) continue;  // a move between placements
    CHECK(ActorId::device_type(t->id()) == DeviceType::kCuda);
    if (b.own()) {
      ++own;
      CHECK(b.comm_group() < 0);
      CHECK(compiler::boxing_task(p, *t).ok());
      continue;
    }
    const auto collective = axis_collective(compiler::read_sbp(b.in_sbp()), compiler::read_sbp(b.out_sbp()));
    REQUIRE(device_collective(t) == collective.has_value());
    REQUIRE(collective.has_value());
    ++per_scope[static_cast<int>(collective->scope)];
    const plan::CommGroup& g = *p.comm_groups()->Get(static_cast<uint32_t>(b.comm_group()));
    const std::set<int> nodes(g.nodes()->begin(), g.nodes()->end());
    const std::set<int> devices(g.devices()->begin(), g.devices()->end());
    switch (collective->scope) {
      case CollectiveScope::kAll: CHECK(g.nodes()->size() == 4); break;
      case CollectiveScope::kNode: CHECK((nodes == std::set<int>{t->node()} && devices.size() == 2)); break;
      case CollectiveScope::kLane:
        CHECK((nodes.size() == 2 && devices == std::set<int>{t->device()}));
        // A lane works on its device's slice, never on the tensor a node's
        // devices all hold (each lane would send it across again), but for
        // a tensor with no axis to slice (the loss).
        if (compiler::read_sbp(b.in_sbp()).within.kind != Sbp::kSplit) {
          const plan::RegstDesc* in = compiler::find_regst(p, t->inputs()->Get(0));
          REQUIRE(in != nullptr);
          CHECK(std::all_of(in->logical_shape()->begin(), in->logical_shape()->end(), [](int64_t d) { return d < 2; }));
        }
        break;
    }
  }
  CHECK(per_scope[static_cast<int>(CollectiveScope::kAll)] > 0);
  CHECK(per_scope[static_cast<int>(CollectiveScope::kNode)] > 0);
  CHECK(per_scope[static_cast<int>(CollectiveScope::kLane)] > 0);
  CHECK(own > 0);
  // Communicators that cross nodes never share a tag: their messages meet
  // on the same links (the set-up's, and host staging's).
  std::set<int64_t> tags;
  size_t crossing = 0;
  for (const plan::CommGroup* g : *p.comm_groups()) {
    if (std::set<int>(g->nodes()->begin(), g->nodes()->end()).size() < 2) continue;
    for (const plan::CommCall* c : *g->calls()) tags.insert(c->tag());
    crossing += g->calls()->size();
  }
  CHECK(tags.size() == crossing);
  // rill plan --json names each one's call on its axis and what a ring
  // sends of its part: an all-reduce 2 (n - 1) / n of it, an all-to-all
  // (n - 1) / n^2 (a rank holds 1/n of the part), the others (n - 1) / n.
  const auto json = nlohmann::json::parse(compiler::plan_json(p));
  int named = 0;
  std::set<std::string> kinds;
  for (const auto& t : json["tasks"]) {
    if (!t.contains("boxing") || !t["boxing"].contains("comm_group")) continue;
    const auto& box = t["boxing"];
    const std::string kind = box["collective"];
    const int64_t bytes = box["logical_bytes"], sent = box["bytes_sent_per_step"], n = box["num_nodes"];
    CAPTURE(kind);
    CHECK((kind == "all_reduce" || kind == "reduce_scatter" || kind == "all_gather" || kind == "all_to_all"));
    const int64_t want = kind == "all_to_all" ? (n - 1) * bytes / (n * n) : (kind == "all_reduce" ? 2 : 1) * (n - 1) * bytes / n;
    CHECK(std::abs(sent - want) <= 1);  // the share in floating point, truncated
    kinds.insert(kind);
    ++named;
  }
  CHECK(named > 0);
  CHECK(kinds.size() == 4);

  // On 4 nodes x cuda:4 every node's plan has the same communicators and calls.
  const std::string whole = compile_ok(job, "cuda:4", {}, 4);
  CHECK(plan_of(whole)->comm_groups()->size() == 4 + 4 + 1);
  for (const int own : alike_node_by_node(job, "cuda:4", 4, whole)) CHECK(own > 0);
}

#endif  // RILL_WITH_CUDA

}  // namespace
}  // namespace rill
