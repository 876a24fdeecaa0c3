// The Plan as bytes: determinism, verification, JSON and DOT views, and the
// errors compile() reports for bad jobs.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using testing::compile_ok;
using testing::plan_of;

StatusOr<std::string> compile_on(const graph::Job& job, const std::string& devices) {
  auto cluster = compiler::parse_devices(devices, 1);
  REQUIRE(cluster.ok());
  return compiler::compile(job, *cluster, {});
}

bool mentions(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST_CASE("the same job compiles to the same bytes") {
  for (const char* devices : {"cpu:1", "cpu:2", "cpu:3"}) {
    std::string a = compile_ok(testing::mlp_job(12, 6), devices);
    graph::Job copy = testing::mlp_job(12, 6);
    std::string b = compile_ok(copy, devices);
    CHECK(a == b);
  }
  CHECK(compile_ok(testing::mlp_job(), "cpu:1") != compile_ok(testing::mlp_job(), "cpu:2"));
}

TEST_CASE("verify_plan accepts compiled plans and rejects bad bytes") {
  std::string bytes = compile_ok(testing::linear_regression_job(), "cpu:2");
  REQUIRE(compiler::verify_plan(bytes).ok());

  SUBCASE("empty and truncated") {
    CHECK(!compiler::verify_plan("").ok());
    for (size_t keep : {size_t{4}, size_t{16}, bytes.size() / 2, bytes.size() - 8}) {
      auto r = compiler::verify_plan(std::string_view(bytes).substr(0, keep));
      CHECK_MESSAGE(!r.ok(), keep);
      if (!r.ok()) CHECK(r.status().code() == Code::kDataLoss);
    }
  }
  SUBCASE("a corrupt root offset") {
    std::string bad = bytes;
    bad[0] = bad[1] = bad[2] = static_cast<char>(0x7f);
    auto r = compiler::verify_plan(bad);
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "verification"));
  }
  SUBCASE("a wrong identifier") {
    std::string bad = bytes;
    bad[4] = 'X';
    auto r = compiler::verify_plan(bad);
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "RLPL"));
  }
  SUBCASE("another version") {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<plan::Task>> tasks;
    std::vector<flatbuffers::Offset<plan::RegstDesc>> regsts;
    std::vector<flatbuffers::Offset<plan::Dataset>> datasets;
    plan::FinishPlanBuffer(b, plan::CreatePlanDirect(b, compiler::kPlanVersion + 1, "job", 1, 1, 1, 1, 1, &datasets,
                                                     &tasks, &regsts));
    auto r = compiler::verify_plan(std::string_view(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "version"));
  }
  SUBCASE("an unknown schedule, or no stages") {
    for (auto [schedule, stages] : {std::pair<const char*, int>{"zigzag", 1}, {"1f1b", 0}}) {
      flatbuffers::FlatBufferBuilder b;
      std::vector<flatbuffers::Offset<plan::Task>> tasks;
      std::vector<flatbuffers::Offset<plan::RegstDesc>> regsts;
      std::vector<flatbuffers::Offset<plan::Dataset>> datasets;
      plan::FinishPlanBuffer(b, plan::CreatePlanDirect(b, compiler::kPlanVersion, "job", 1, 1, 1, 1, 1, &datasets,
                                                       &tasks, &regsts, /*node=*/-1, /*num_tasks=*/0, nullptr,
                                                       /*micro_batches=*/1, schedule, stages));
      auto r =
          compiler::verify_plan(std::string_view(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
      REQUIRE(!r.ok());
      CHECK(mentions(r.status(), stages == 0 ? "0 pipeline stages" : "schedule 'zigzag'"));
    }
  }
  SUBCASE("a task reading a regst that does not exist") {
    flatbuffers::FlatBufferBuilder b;
    std::vector<int64_t> inputs = {3}, outputs;
    std::vector<flatbuffers::Offset<plan::Task>> tasks = {
        plan::CreateTaskDirect(b, ActorId::make(0, DeviceType::kCpu, 0, 0, 0), plan::TaskKind::Compute, "t", "relu",
                               nullptr, 0, 0, ActorId::thread_key(ActorId::make(0, DeviceType::kCpu, 0, 0, 0)),
                               &inputs, &outputs)};
    std::vector<flatbuffers::Offset<plan::RegstDesc>> regsts;
    std::vector<flatbuffers::Offset<plan::Dataset>> datasets;
    plan::FinishPlanBuffer(b, plan::CreatePlanDirect(b, compiler::kPlanVersion, "job", 1, 1, 1, 1, 1, &datasets,
                                                     &tasks, &regsts, /*node=*/-1, /*num_tasks=*/1, nullptr,
                                                     /*micro_batches=*/1, "1f1b"));
    auto r = compiler::verify_plan(std::string_view(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "regst 3"));
  }
}

TEST_CASE("plan_json parses back and lists every task and regst") {
  std::string bytes = compile_ok(testing::mlp_job(), "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  nlohmann::json json = nlohmann::json::parse(compiler::plan_json(p));
  CHECK(json["job"] == "mlp");
  CHECK(json["steps"] == 5);
  REQUIRE(json["tasks"].size() == p.tasks()->size());
  REQUIRE(json["regsts"].size() == p.regsts()->size());
  for (uint32_t i = 0; i < p.tasks()->size(); ++i) {
    const auto& t = json["tasks"][i];
    CHECK(t["id"].get<uint64_t>() == p.tasks()->Get(i)->id());
    CHECK(t["name"] == p.tasks()->Get(i)->name()->str());
    CHECK(t["kind"] == plan::EnumNameTaskKind(p.tasks()->Get(i)->kind()));
    for (const char* key : {"op", "node", "device", "thread"}) CHECK(t.contains(key));
  }
  for (const auto& r : json["regsts"])
    for (const char* key : {"id", "name", "producer", "consumers", "register_num", "bytes", "shape", "sbp"})
      CHECK(r.contains(key));
  CHECK(json["regsts"][0]["sbp"] == "S(0)");  // the first source's image piece
}

TEST_CASE("plan_dot draws every task and one edge per consumer") {
  std::string bytes = compile_ok(testing::linear_regression_job(), "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  std::string dot = compiler::plan_dot(p);
  CHECK(dot.rfind("digraph", 0) == 0);
  for (uint32_t i = 0; i < p.tasks()->size(); ++i) CHECK(dot.find(fmt::format("  t{} [", i)) != std::string::npos);
  size_t edges = 0, consumers = 0;
  for (size_t at = dot.find("->"); at != std::string::npos; at = dot.find("->", at + 1)) ++edges;
  for (const plan::RegstDesc* r : *p.regsts()) consumers += r->consumers()->size();
  // Boxing task names contain "->" too ("boxing:...:P->B").
  size_t boxing_names = testing::tasks_of_kind(p, plan::TaskKind::Boxing).size();
  CHECK(edges == consumers + boxing_names);
  CHECK(dot.find("cluster_node0") != std::string::npos);
  CHECK(dot.find(" x1\"") != std::string::npos);  // a model regst
  CHECK(dot.find(" x2\"") != std::string::npos);
}

TEST_CASE("errors name what is wrong") {
  SUBCASE("a global batch smaller than the device count") {
    auto r = compile_on(testing::linear_regression_job(8, 2), "cpu:4");
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "smaller than"));
  }
  SUBCASE("an unknown tensor") {
    graph::Job job = testing::linear_regression_job();
    job.ops[1].inputs[1] = "nope";
    auto r = compile_on(job, "cpu:1");
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "nope"));
  }
  SUBCASE("an unknown op type") {
    graph::Job job = testing::linear_regression_job();
    job.ops[0].type = "frobnicate";
    auto r = compile_on(job, "cpu:1");
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "frobnicate"));
  }
  SUBCASE("an unknown loss") {
    graph::Job job = testing::linear_regression_job();
    job.loss = "missing_loss";
    auto r = compile_on(job, "cpu:1");
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "missing_loss"));
  }
  SUBCASE("an unknown optimizer") {
    graph::Job job = testing::linear_regression_job();
    job.optimizer.type = "lbfgs";
    auto r = compile_on(job, "cpu:1");
    REQUIRE(!r.ok());
    CHECK(mentions(r.status(), "lbfgs"));
  }
  SUBCASE("a dataset too small for one batch") {
    graph::Job job = testing::linear_regression_job(3, 4);
    job.train.steps = 0;
    job.train.epochs = 1;
    auto r = compile_on(job, "cpu:1");
    REQUIRE(!r.ok());
  }
}

}  // namespace
}  // namespace rill
