// node_plan cuts a whole plan into the plans of its nodes; verify_plan accepts
// those and rejects broken ones; find_regst and find_task look up by global id.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using plan::TaskKind;
using testing::compile_ok;
using testing::plan_of;

bool mentions(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

template <typename T>
std::vector<T> vec(const flatbuffers::Vector<T>* v) {
  return {v->begin(), v->end()};
}

// Checks the node plans of `whole_bytes` against it: each verifies, holds its
// node's tasks and the regsts they touch, copied unchanged; together the node
// plans hold every task exactly once.
void check_node_plans(const std::string& whole_bytes) {
  const plan::Plan& whole = *plan_of(whole_bytes);
  const nlohmann::json whole_json = nlohmann::json::parse(compiler::plan_json(whole));
  std::map<uint64_t, nlohmann::json> whole_tasks;
  std::map<int64_t, nlohmann::json> whole_regsts;
  for (const auto& t : whole_json["tasks"]) whole_tasks[t["id"].get<uint64_t>()] = t;
  for (const auto& r : whole_json["regsts"]) whole_regsts[r["id"].get<int64_t>()] = r;
  std::map<uint64_t, int> holders;  // task id -> node plans holding it
  for (int node = 0; node < whole.num_nodes(); ++node) {
    CAPTURE(node);
    auto bytes = compiler::node_plan(whole_bytes, node);
    REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
    auto verified = compiler::verify_plan(*bytes);
    REQUIRE_MESSAGE(verified.ok(), verified.status().to_string());
    const plan::Plan& p = **verified;
    CHECK(p.node() == node);
    CHECK(p.num_tasks() == whole.num_tasks());
    CHECK(p.version() == whole.version());
    CHECK(p.job_name()->str() == whole.job_name()->str());
    CHECK(p.steps() == whole.steps());
    CHECK(p.global_batch() == whole.global_batch());
    CHECK(p.log_every() == whole.log_every());
    CHECK(p.num_nodes() == whole.num_nodes());
    CHECK(p.devices_per_node() == whole.devices_per_node());
    REQUIRE(p.datasets()->size() == whole.datasets()->size());
    for (uint32_t d = 0; d < p.datasets()->size(); ++d) {
      CHECK(p.datasets()->Get(d)->name()->str() == whole.datasets()->Get(d)->name()->str());
      REQUIRE(p.datasets()->Get(d)->tensors()->size() == whole.datasets()->Get(d)->tensors()->size());
      for (uint32_t k = 0; k < p.datasets()->Get(d)->tensors()->size(); ++k) {
        CHECK(vec(p.datasets()->Get(d)->tensors()->Get(k)->f32()) ==
              vec(whole.datasets()->Get(d)->tensors()->Get(k)->f32()));
        CHECK(vec(p.datasets()->Get(d)->tensors()->Get(k)->i32()) ==
              vec(whole.datasets()->Get(d)->tensors()->Get(k)->i32()));
      }
    }

    const nlohmann::json json = nlohmann::json::parse(compiler::plan_json(p));
    std::set<int64_t> touched;
    for (const auto& t : json["tasks"]) CHECK(t == whole_tasks.at(t["id"].get<uint64_t>()));
    for (const plan::Task* t : *p.tasks()) {
      CHECK(t->node() == node);
      ++holders[t->id()];
      for (int64_t r : *t->inputs()) touched.insert(r);
      for (int64_t r : *t->outputs()) touched.insert(r);
      const plan::Task* original = compiler::find_task(whole, t->id());
      REQUIRE(original != nullptr);
      // Confs come over by reflection: spot-check the nested tables.
      if (t->kind() == TaskKind::Source) {
        CHECK(t->source()->shard() == original->source()->shard());
        CHECK((whole.num_nodes() == 1 || t->source()->shard() == node));  // rows by node first
        CHECK(t->source()->fields()->size() == original->source()->fields()->size());
        CHECK(t->source()->seed() == original->source()->seed());
      }
      if (t->kind() == TaskKind::Variable) {
        CHECK(t->variable()->init_op()->str() == original->variable()->init_op()->str());
        CHECK(t->variable()->update_attrs()->size() == original->variable()->update_attrs()->size());
        CHECK(vec(t->variable()->offset()) == vec(original->variable()->offset()));
      }
      if (t->kind() == TaskKind::Compute) {
        CHECK(t->attrs()->size() == original->attrs()->size());
        CHECK(t->logical_input_shapes()->size() == original->logical_input_shapes()->size());
        CHECK(t->scratch_bytes() == original->scratch_bytes());
      }
      if (t->kind() == TaskKind::Sink) CHECK(vec(t->sink()->partial()) == vec(original->sink()->partial()));
    }
    // Exactly the regsts its tasks touch, each resolving by id: its own
    // unchanged, another node's (read here) with only this node's consumers.
    std::set<int64_t> held;
    for (const auto& r : json["regsts"]) {
      held.insert(r["id"].get<int64_t>());
      auto want = whole_regsts.at(r["id"].get<int64_t>());
      if (ActorId::node(want["producer"].get<uint64_t>()) != static_cast<uint32_t>(node)) {
        auto& consumers = want["consumers"];
        consumers = nlohmann::json(std::vector<uint64_t>());
        for (uint64_t c : whole_regsts.at(r["id"].get<int64_t>())["consumers"])
          if (ActorId::node(c) == static_cast<uint32_t>(node)) consumers.push_back(c);
      }
      CHECK(r == want);
    }
    CHECK(held == touched);
    for (int64_t id : touched) CHECK(compiler::find_regst(p, id) != nullptr);
    for (const plan::RegstDesc* r : *p.regsts()) {
      CHECK(compiler::read_sbp(r->sbp()) == compiler::read_sbp(compiler::find_regst(whole, r->id())->sbp()));
      // A regst of another node: read here where it is made (this node
      // holds its mirror), never written here.
      if (ActorId::node(r->producer()) != static_cast<uint32_t>(node)) {
        CHECK(compiler::find_task(p, r->producer()) == nullptr);
        CHECK(compiler::find_task(whole, r->producer()) != nullptr);
        CHECK(r->consumers()->size() > 0);
      }
    }
  }
  CHECK(holders.size() == whole.tasks()->size());
  for (const auto& [id, count] : holders) CHECK(count == 1);
}

TEST_CASE("node plans of linear regression on 2 nodes x 1 device partition the tasks") {
  const std::string whole = compile_ok(testing::linear_regression_job(), "cpu:1", {}, 2);
  check_node_plans(whole);
  // Node 1's loss is in both plans: made on node 1, read by the sink on node 0.
  const plan::Task* sink = testing::tasks_of_kind(*plan_of(whole), TaskKind::Sink)[0];
  const int64_t loss1 = sink->inputs()->Get(1);
  for (int node = 0; node < 2; ++node) {
    auto bytes = compiler::node_plan(whole, node);
    REQUIRE(bytes.ok());
    const plan::Plan& p = *plan_of(*bytes);
    REQUIRE(compiler::find_regst(p, loss1) != nullptr);
    CHECK(ActorId::node(compiler::find_regst(p, loss1)->producer()) == 1);
    CHECK(testing::tasks_of_kind(p, TaskKind::Boxing).size() == 1);
    CHECK(testing::tasks_of_kind(p, TaskKind::Sink).size() == (node == 0 ? 1 : 0));
    CHECK(testing::tasks_of_kind(p, TaskKind::Send).empty());
    CHECK(testing::tasks_of_kind(p, TaskKind::Recv).empty());
  }
}

TEST_CASE("node plans of the MLP on 2 nodes x 2 devices, and of a one-node plan") {
  check_node_plans(compile_ok(testing::mlp_job(), "cpu:2", {}, 2));
  compiler::CompileOptions eval;
  eval.mode = compiler::Mode::kEval;
  check_node_plans(compile_ok(testing::mlp_job(), "cpu:2", eval, 2));
  const std::string one = compile_ok(testing::mlp_job(), "cpu:2");
  check_node_plans(one);
  auto only = compiler::node_plan(one, 0);
  REQUIRE(only.ok());
  CHECK(plan_of(*only)->tasks()->size() == plan_of(one)->tasks()->size());
  CHECK(plan_of(*only)->regsts()->size() == plan_of(one)->regsts()->size());
}

TEST_CASE("node_plan rejects bad nodes, node plans and bad bytes") {
  const std::string whole = compile_ok(testing::linear_regression_job(), "cpu:1", {}, 2);
  for (int bad : {-1, 2, 100}) {
    auto r = compiler::node_plan(whole, bad);
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), std::to_string(bad)));
  }
  auto node0 = compiler::node_plan(whole, 0);
  REQUIRE(node0.ok());
  auto again = compiler::node_plan(*node0, 0);
  REQUIRE(!again.ok());
  CHECK(mentions(again.status(), "whole plan"));
  CHECK(!compiler::node_plan("not a plan", 0).ok());
}

TEST_CASE("find_regst and find_task look up by global id") {
  const std::string whole = compile_ok(testing::mlp_job(), "cpu:1", {}, 2);
  const plan::Plan& p = *plan_of(whole);
  for (uint32_t i = 0; i < p.regsts()->size(); ++i) CHECK(compiler::find_regst(p, i) == p.regsts()->Get(i));
  for (const plan::Task* t : *p.tasks()) CHECK(compiler::find_task(p, t->id()) == t);
  CHECK(compiler::find_regst(p, -1) == nullptr);
  CHECK(compiler::find_regst(p, p.regsts()->size()) == nullptr);
  // Right index, wrong node or thread: not that task.
  const uint64_t first = p.tasks()->Get(0)->id();
  CHECK(compiler::find_task(p, ActorId::make(ActorId::node(first) + 1, ActorId::device_type(first),
                                             ActorId::device(first), 0, 0)) == nullptr);
  for (int node = 0; node < 2; ++node) {
    auto bytes = compiler::node_plan(whole, node);
    REQUIRE(bytes.ok());
    const plan::Plan& np = *plan_of(*bytes);
    std::set<int64_t> held;
    for (const plan::RegstDesc* r : *np.regsts()) {
      held.insert(r->id());
      CHECK(compiler::find_regst(np, r->id()) == r);
    }
    for (uint32_t i = 0; i < p.regsts()->size(); ++i)
      CHECK((compiler::find_regst(np, i) != nullptr) == (held.count(i) == 1));
    for (const plan::Task* t : *p.tasks())
      CHECK((compiler::find_task(np, t->id()) != nullptr) == (t->node() == node));
  }
}

// A hand-made plan over 2 nodes: tasks (id, inputs, outputs) and regsts
// (id, producer, consumers); node -1 for a whole plan.
struct TaskSpec {
  uint64_t id;
  std::vector<int64_t> inputs, outputs;
};
struct RegstSpec {
  int64_t id;
  uint64_t producer;
  std::vector<uint64_t> consumers;
  plan::DType dtype = plan::DType::F32;
};

std::string make_plan(int node, int64_t num_tasks, const std::vector<TaskSpec>& task_specs,
                      const std::vector<RegstSpec>& regst_specs) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<plan::Task>> tasks;
  for (const TaskSpec& t : task_specs)
    tasks.push_back(plan::CreateTaskDirect(b, t.id, TaskKind::Compute, "t", "relu", nullptr,
                                           static_cast<int>(ActorId::node(t.id)), 0, ActorId::thread_key(t.id),
                                           &t.inputs, &t.outputs));
  std::vector<flatbuffers::Offset<plan::RegstDesc>> regsts;
  const std::vector<int64_t> shape = {1};
  const plan::Sbp b_axis(plan::SbpKind::Broadcast, 0);
  const plan::NdSbp sbp(b_axis, b_axis);
  for (const RegstSpec& r : regst_specs)
    regsts.push_back(plan::CreateRegstDescDirect(b, r.id, "r", r.producer, &r.consumers, 1, r.dtype, &shape,
                                                 &shape, &sbp, 4));
  std::vector<flatbuffers::Offset<plan::Dataset>> datasets;
  plan::FinishPlanBuffer(b, plan::CreatePlanDirect(b, compiler::kPlanVersion, "job", 1, 1, 1, 2, 1, &datasets, &tasks,
                                                   &regsts, node, num_tasks, nullptr, 1, "1f1b"));
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

uint64_t cpu(uint32_t node, uint32_t index) { return ActorId::make(node, DeviceType::kCpu, 0, 0, index); }

TEST_CASE("verify_plan checks node plans: nodes, order, ids below num_tasks, producers on the node") {
  // Node 1: task 3 reads regst 7 from node 0's task 1 and writes regst 9 for task 4.
  const std::vector<TaskSpec> tasks = {{cpu(1, 3), {7}, {9}}, {cpu(1, 4), {9}, {}}};
  const std::vector<RegstSpec> regsts = {{7, cpu(0, 1), {cpu(1, 3)}}, {9, cpu(1, 3), {cpu(1, 4)}}};
  auto ok = compiler::verify_plan(make_plan(1, 5, tasks, regsts));
  CHECK_MESSAGE(ok.ok(), ok.status().to_string());

  auto fails = [](const std::string& bytes, const std::string& text) {
    auto r = compiler::verify_plan(bytes);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::kDataLoss);
    CHECK_MESSAGE(mentions(r.status(), text), r.status().to_string());
  };
  SUBCASE("a task of another node") {
    fails(make_plan(0, 5, tasks, regsts), "on node 1");
  }
  SUBCASE("a node out of range") {
    fails(make_plan(2, 5, tasks, regsts), "node 2");
  }
  SUBCASE("an index at or above num_tasks") {
    fails(make_plan(1, 4, tasks, regsts), "index 4 of 4");
  }
  SUBCASE("a repeated task id") {
    fails(make_plan(1, 5, {tasks[0], tasks[0]}, regsts), "repeated");
  }
  SUBCASE("regsts out of order") {
    fails(make_plan(1, 5, tasks, {regsts[1], regsts[0]}), "unsorted");
  }
  SUBCASE("a regst that is not in the plan") {
    fails(make_plan(1, 5, tasks, {regsts[1]}), "regst 7");
  }
  SUBCASE("a producer on this node that is not in the plan") {
    std::vector<RegstSpec> bad = regsts;
    bad[0].producer = cpu(1, 2);
    fails(make_plan(1, 5, tasks, bad), "producer");
  }
  SUBCASE("a consumer on this node that is not in the plan") {
    std::vector<RegstSpec> bad = regsts;
    bad[1].consumers.push_back(cpu(1, 0));
    fails(make_plan(1, 5, tasks, bad), "consumer");
  }
  SUBCASE("a dtype this build does not know (FlatBuffers' verifier does not check an enum's range)") {
    std::vector<RegstSpec> bad = regsts;
    bad[1].dtype = static_cast<plan::DType>(7);
    fails(make_plan(1, 5, tasks, bad), "regst 9 has dtype 7, which this build does not know");
  }
  SUBCASE("a whole plan must hold every task at its index") {
    fails(make_plan(-1, 5, tasks, regsts), "num_tasks");
    fails(make_plan(-1, 2, tasks, regsts), "task at 0");
  }
}

}  // namespace
}  // namespace rill
