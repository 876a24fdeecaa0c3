// Placements in plans: tasks only on their placement's devices, moves
// between placements (pieces read as they are, or sliced where they live so
// only the overlap crosses nodes, then assembled), collectives among a
// placement's nodes only, placements in `rill plan`, and the errors.
#include <doctest/doctest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "graph/placement.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using plan::TaskKind;
using testing::compile_ok;
using testing::plan_of;
using testing::producer;
using testing::regst;
using testing::task;
using testing::task_named;
using testing::tasks_of_kind;

graph::Placement parsed(const std::string& text) {
  auto p = graph::parse_placement(text);
  REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  return *p;
}

// mlp_job cut after the hidden layer: stage 0 on `first`, stage 1 on `second`.
graph::Job staged(const std::string& first, const std::string& second) {
  graph::Job job = testing::mlp_job(8, 4);
  job.groups.push_back({"stage0", parsed(first), {"image", "label", "w1", "b1", "fc1", "bias1", "act1"}});
  job.groups.push_back({"stage1", parsed(second), {"w2", "fc2", "xent", "mean", "acc"}});
  return job;
}

std::string placement_of(const plan::Plan& p, const plan::Task* t) {
  return t->placement() < 0 ? "" : p.placements()->Get(static_cast<uint32_t>(t->placement()))->str();
}

StatusOr<std::string> compile_on(const graph::Job& job, const std::string& devices, int nodes) {
  auto cluster = compiler::parse_devices(devices, nodes);
  REQUIRE(cluster.ok());
  return compiler::compile(job, *cluster, {});
}

TEST_CASE("a job in two stages: each op's tasks on its stage's devices only, activations sliced before they cross") {
  const std::string bytes = compile_ok(staged("cpu 0:0", "cpu 1:0-1"), "cpu:2", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  REQUIRE(p.placements() != nullptr);
  CHECK(p.placements()->size() == 3);  // the job's devices, then each stage
  std::set<std::string> stage0 = {"fc1", "bias1", "act1", "w1", "b1"};
  int fc1 = 0, fc2 = 0;
  for (const plan::Task* t : *p.tasks()) {
    const std::string name = t->name()->str();
    const std::string base = name.substr(0, name.find('@'));
    if (t->kind() != TaskKind::Compute && t->kind() != TaskKind::Variable) continue;
    CAPTURE(name);
    const bool backward0 = base.rfind("grad/fc1/", 0) == 0 || base.rfind("grad/bias1/", 0) == 0 ||
                           base.rfind("grad/act1/", 0) == 0;
    if (stage0.count(base) != 0 || backward0) {
      CHECK(t->node() == 0);
      CHECK(t->device() == 0);
      CHECK(placement_of(p, t) == "cpu 0:0");
    } else {
      CHECK(t->node() == 1);
      CHECK(placement_of(p, t) == "cpu 1:0-1");
    }
    fc1 += base == "fc1";
    fc2 += base == "fc2";
  }
  CHECK(fc1 == 1);
  CHECK(fc2 == 2);
  // Stage 0 runs on one device: no boxing of its gradients; stage 1's are
  // summed on node 1 alone.
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing)) {
    CAPTURE(t->name()->str());
    if (t->boxing()->origins() == nullptr) {
      CHECK(t->node() == 1);
      CHECK(t->boxing()->num_nodes() == 1);
      CHECK(t->boxing()->peers()->size() == 0);
    }
  }
  // The activation a1 [4, 8] leaves node 0 as two slices of 2 rows, one per
  // device of stage 1, each cut on node 0 and read by fc2 as it arrives.
  int slices = 0;
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing)) {
    if (t->boxing()->origins() == nullptr || t->name()->str().find("move:a1:") != 0) continue;
    ++slices;
    CHECK(t->node() == 0);
    CHECK(t->device() == 0);
    const plan::RegstDesc* out = regst(p, t->outputs()->Get(0));
    CHECK(std::vector<int64_t>(out->shape()->begin(), out->shape()->end()) == std::vector<int64_t>{2, 8});
    const int64_t row = t->boxing()->origins()->Get(2);  // the output's origin, after the input's
    CHECK(row == 2 * (slices - 1));
  }
  CHECK(slices == 2);
  for (int d = 0; d < 2; ++d) {
    const plan::Task* fc2_task = task_named(p, fmt::format("fc2@{}", d));
    const plan::Task* slice = producer(p, fc2_task->inputs()->Get(0));  // read where it is cut
    CHECK(slice->kind() == TaskKind::Boxing);
    CHECK(slice->node() == 0);
    CHECK(regst(p, fc2_task->inputs()->Get(0))->bytes() == 2 * 8 * 4);
  }
  // The gradient of a1 comes back from two pieces, assembled on node 0.
  bool assembled = false;
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing))
    if (t->boxing()->origins() != nullptr && t->name()->str().rfind("move:grad/fc2/", 0) == 0) {
      assembled = true;
      CHECK(t->node() == 0);
      CHECK(t->inputs()->size() == 2);
      for (int64_t in : *t->inputs()) CHECK(producer(p, in)->node() == 1);  // read where they are made
    }
  CHECK(assembled);

  // rill plan: placements by task, moves named as such.
  auto json = nlohmann::json::parse(compiler::plan_json(p));
  CHECK(json["placements"] == nlohmann::json({"cpu 0-1:0-1", "cpu 0:0", "cpu 1:0-1"}));
  bool saw_move = false;
  for (const auto& t : json["tasks"]) {
    if (t["name"] == "fc1@0") CHECK(t["placement"] == "cpu 0:0");
    if (t["kind"] == "Sink") CHECK(t["placement"].is_null());
    if (t.contains("boxing") && t["boxing"]["collective"] == "move") saw_move = true;
  }
  CHECK(saw_move);
  const std::string dot = compiler::plan_dot(p);
  CHECK(dot.find("cluster_placements") != std::string::npos);
  CHECK(dot.find("fillcolor") != std::string::npos);
}

TEST_CASE("pieces already where they are needed move without a task; matching pieces on another node go as they are") {
  // Stage 0 data parallel over node 0's 2 devices, stage 1 over node 1's:
  // S(0) pieces of the same rows, so each crosses as it is.
  const std::string bytes = compile_ok(staged("cpu 0:0-1", "cpu 1:0-1"), "cpu:2", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  // The boxings there are the gradients' sums within each stage, none a move
  // (counted first: a loop over none would pass).
  const auto boxings = tasks_of_kind(p, TaskKind::Boxing);
  REQUIRE(boxings.size() == 9);
  for (const plan::Task* t : boxings) CHECK(t->boxing()->origins() == nullptr);
  // Overlapping placements: the same devices for both stages but listed
  // apart; nothing moves at all and no Send/Recv appears.
  const std::string same = compile_ok(staged("cpu 0:0-1", "cpu [1,2] 0:0-1"), "cpu:2", {}, 2);
  const plan::Plan& q = *plan_of(same);
  const auto same_boxings = tasks_of_kind(q, TaskKind::Boxing);
  REQUIRE(same_boxings.size() == 9);
  for (const plan::Task* t : same_boxings) CHECK(t->boxing()->origins() == nullptr);
  CHECK(tasks_of_kind(q, TaskKind::Send).empty());
}

TEST_CASE("inputs of one dataset on different placements: a source on each, reading its own fields") {
  graph::Job job = staged("cpu 0:0-1", "cpu 1:0-1");
  job.groups[0].members.erase(job.groups[0].members.begin() + 1);  // label
  job.groups[1].members.push_back("label");
  const std::string bytes = compile_ok(job, "cpu:2", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  auto sources = tasks_of_kind(p, TaskKind::Source);
  REQUIRE(sources.size() == 4);
  for (const plan::Task* s : sources) {
    REQUIRE(s->source()->fields()->size() == 1);
    CHECK(s->source()->fields()->Get(0)->str() == (s->node() == 0 ? "image" : "label"));
    CHECK(s->source()->num_shards() == 2);
  }
  // The labels are read where the loss is: nothing but activations and
  // their gradients crosses, no label move.
  for (const plan::RegstDesc* r : *p.regsts())
    if (r->name()->str() == "label")
      for (uint64_t c : *r->consumers()) CHECK(ActorId::node(c) == ActorId::node(r->producer()));
}

// x [8, 6] made in `in` on `from`, read in `out` on `to` (identity ops).
graph::Job moved(const std::string& from, const std::string& in, const std::string& to, const std::string& out) {
  graph::Job job = testing::mlp_job(8, 8);
  job.inputs.resize(1);  // image [8, 4]
  job.variables.clear();
  NdSbp in_sbp, out_sbp;
  REQUIRE(parse_nd_sbp(in, &in_sbp));
  REQUIRE(parse_nd_sbp(out, &out_sbp));
  graph::Op a{"a", "identity", {"image"}, {"a"}, {}, {in_sbp}, parsed(from)};
  graph::Op b{"b", "identity", {"a"}, {"b"}, {}, {out_sbp}, parsed(to)};
  graph::Op loss{"loss", "reduce_sum", {"b"}, {"loss"}, {}, {}, parsed(to)};
  job.ops = {a, b, loss};
  job.metrics.clear();
  job.loss = "loss";
  return job;
}

TEST_CASE("a move sends each part to a node once: alike target pieces share replicas and slices") {
  auto count = [](const plan::Plan& p, TaskKind kind, const std::string& part) {
    int n = 0;
    for (const plan::Task* t : tasks_of_kind(p, kind)) n += t->name()->str().find(part) != std::string::npos;
    return n;
  };
  // What crosses: (regst of a, node reading it there); the bytes of a slot
  // reach a node once, however many of its tasks read it.
  auto crossings = [](const plan::Plan& p) {
    std::set<std::pair<int64_t, uint32_t>> out;
    for (const plan::RegstDesc* r : *p.regsts())
      if (r->name()->str() == "a")
        for (uint64_t c : *r->consumers())
          if (ActorId::node(c) != ActorId::node(r->producer())) out.insert({r->id(), ActorId::node(c)});
    return out.size();
  };
  // B on node 0's two devices to B on node 1's: one copy crosses, not one per device.
  const std::string whole = compile_ok(moved("cpu 0:0-1", "B", "cpu 1:0-1", "B"), "cpu:2", {}, 2);
  CHECK(crossings(*plan_of(whole)) == 1);
  // Column halves on node 0 to row halves, each replicated on the two
  // devices of nodes 1 and 2: one slice per (column half, row half), and
  // each crosses to its node once.
  const std::string rows = compile_ok(moved("cpu 0:0-1", "S(1)", "cpu [2,2] 1-2:0-1", "(S(0), B)"), "cpu:2", {}, 3);
  const plan::Plan& p = *plan_of(rows);
  CHECK(count(p, TaskKind::Boxing, "move:a:S(1)->(S(0), B)@slice") == 4);
  CHECK(crossings(p) == 4);
}

TEST_CASE("a placement on some nodes sums its gradients among those nodes only") {
  graph::Job job = testing::mlp_job(12, 6);
  job.groups.push_back({"all", parsed("cpu 1-2:0"), {"image", "label", "w1", "b1", "w2", "fc1", "bias1", "act1",
                                                    "fc2", "xent", "mean", "acc"}});
  const std::string bytes = compile_ok(job, "cpu:1", {}, 3);
  const plan::Plan& p = *plan_of(bytes);
  int collectives = 0;
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing)) {
    CHECK(t->node() >= 1);
    const auto* peers = t->boxing()->peers();
    if (peers == nullptr || peers->size() == 0) continue;
    ++collectives;
    REQUIRE(peers->size() == 2);
    CHECK(ActorId::node(peers->Get(0)) == 1);
    CHECK(ActorId::node(peers->Get(1)) == 2);
    CHECK(t->boxing()->num_nodes() == 2);
  }
  CHECK(collectives > 0);
  for (const plan::Task* t : *p.tasks())
    if (t->kind() != TaskKind::Sink) CHECK(t->node() != 0);
}

#ifdef RILL_WITH_CUDA
// Stages on two GPUs of one node: what one GPU makes and the other reads
// crosses peer to peer (one device-to-device copy on the reader's GPU, no
// host memory between), and moves run on the node's fifth comm thread,
// which no collective blocks.
TEST_CASE("stages on two GPUs of one node: tensors cross GPU to GPU, moves on their own comm thread") {
  graph::Job job = staged("cuda 0:0", "cuda 0:1");
  const std::string bytes = compile_ok(job, "cuda:2");
  const plan::Plan& p = *plan_of(bytes);
  const plan::Task* fc2 = task_named(p, "fc2@0");
  REQUIRE(fc2 != nullptr);
  const plan::Task* d2d = producer(p, fc2->inputs()->Get(0));
  CHECK(d2d->kind() == TaskKind::Copy);
  CHECK(d2d->name()->str().rfind("d2d:", 0) == 0);
  CHECK(ActorId::device(d2d->id()) == 1);
  CHECK(regst(p, d2d->outputs()->Get(0))->device() == 1);
  CHECK(regst(p, d2d->inputs()->Get(0))->device() == 0);
  CHECK(producer(p, d2d->inputs()->Get(0))->name()->str() == "act1@0");
  // The gradient going back the same way, and nothing between the GPUs
  // through host memory: no copy into a GPU reads what a copy out of one wrote.
  int peer_copies = 0;
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Copy)) {
    const int from = regst(p, t->inputs()->Get(0))->device(), to = regst(p, t->outputs()->Get(0))->device();
    CHECK(from != to);
    if (from >= 0 && to >= 0) {
      ++peer_copies;
      CHECK(ActorId::device(t->id()) == static_cast<uint32_t>(to));
    }
    if (from < 0) CHECK(producer(p, t->inputs()->Get(0))->kind() != TaskKind::Copy);
  }
  CHECK(peer_copies >= 2);
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing))
    if (t->boxing()->origins() != nullptr) {
      CHECK(ActorId::device_type(t->id()) == DeviceType::kComm);
      CHECK(ActorId::device(t->id()) == 4);
    }
}
#endif

TEST_CASE("placement errors name the element, the placement and what is wrong") {
  auto fails_with = [](const graph::Job& job, const std::string& devices, int nodes, const std::string& part) {
    CAPTURE(part);
    auto r = compile_on(job, devices, nodes);
    REQUIRE(!r.ok());
    CHECK_MESSAGE(r.status().message().find(part) != std::string::npos, r.status().message());
  };
  fails_with(staged("cpu 0:0", "cpu 2:0"), "cpu:1", 2,
             "variable 'w2' (group 'stage1'): placement 'cpu 2:0' names node 2, but the cluster has 2 node(s)");
  fails_with(staged("cpu 0:0", "cpu 1:0-2"), "cpu:2", 2,
             "placement 'cpu 1:0-2' names device 2, but each node runs cpu:2 (devices 0 to 1)");
  fails_with(staged("cpu 0:0", "cuda 1:0"), "cpu:1", 2,
             "placement 'cuda 1:0' is on cuda devices, but the job runs on cpu:1");
  graph::Job two_d = staged("cpu 0-1:0-1", "cpu 0-1:0-1");
  two_d.variables[0].sbp = NdSbp(Sbp::broadcast(), Sbp::split(1));
  fails_with(two_d, "cpu:2", 3,
             "variable 'w1': SBP (B, S(1)) is 2-D, but placement 'cpu 0-1:0-1' is 1-D; write it with its hierarchy");
  graph::Job empty = staged("cpu 0:0", "cpu 1:0");
  empty.ops[0].placement = graph::Placement{};
  empty.groups[0].members.erase(empty.groups[0].members.begin() + 4);  // fc1, placed by itself
  fails_with(empty, "cpu:1", 2, "op 'fc1': the placement names no devices");
  graph::Job small = staged("cpu 0-1:0-1", "cpu 1:0");
  small.train.batch_size = 2;
  fails_with(small, "cpu:2", 2, "input 'image': the batch of 2 is smaller than the 4 devices it is split over");
}

}  // namespace
}  // namespace rill
