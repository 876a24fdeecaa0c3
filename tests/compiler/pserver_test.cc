// The parameter-server transpile (compiler/pserver.h): Fluid's block slicing
// (slice_var_up, min_block_size, rows kept whole), the split methods, the
// errors for pservers the cluster does not have, and the plans it makes:
// blocks and their updates on the pservers, the trainers' gradients summed
// by the pserver's move, no collective among the trainers.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "compiler/pserver.h"
#include "graph/job_file.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using testing::compile_ok;
using testing::plan_of;
using testing::tasks_of_kind;

graph::Job mlp_sample(const std::string& overrides_csv = "") {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  std::vector<std::string> overrides;
  std::string entry;
  for (char c : overrides_csv + ";") {
    if (c != ';') {
      entry += c;
    } else if (!entry.empty()) {
      overrides.push_back(entry);
      entry.clear();
    }
  }
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/samples/pserver/mlp_pserver.json", overrides);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

compiler::PserverLayout layout_of(const graph::Job& job, int nodes) {
  auto cluster = compiler::parse_devices("cpu:1", nodes);
  REQUIRE(cluster.ok());
  auto layout = compiler::pserver_layout(job, *cluster);
  REQUIRE_MESSAGE(layout.ok(), layout.status().to_string());
  return *layout;
}

std::string blocks_text(const compiler::PserverLayout& layout) {
  std::string out;
  for (const auto& b : layout.blocks)
    out += fmt::format("{} {}+{} {}@{}; ", b.name, b.row_offset, b.rows, b.elements, b.pserver);
  return out;
}

TEST_CASE("pserver layout: blocks of whole rows, none under min_block_size, dealt round robin over every block") {
  // w1 [784, 512]: 2 blocks of ceil(401408 / 2) = 200704 elements = 392 rows;
  // b1 [512] (< 8192 elements) and w3 [512, 10] (5120) stay whole; the
  // counter runs on across variables: w2's first block goes to the pserver
  // after b1's.
  const auto layout = layout_of(mlp_sample(), 4);
  CHECK(layout.pservers == std::vector<int>{0, 1});
  CHECK(layout.trainers == std::vector<int>{2, 3});
  CHECK(blocks_text(layout) ==
        "w1.block0 0+392 200704@0; w1.block1 392+392 200704@1; b1.block0 0+512 512@0; w2.block0 0+256 131072@1; "
        "w2.block1 256+256 131072@0; b2.block0 0+512 512@1; w3.block0 0+512 5120@0; b3.block0 0+10 10@1; ");
}

TEST_CASE("pserver layout: pservers listed out of order, blocks rounded up to whole rows, the last one short") {
  // 3 pservers: w1 in ceil(401408 / 3) = 133803 elements -> 134144 (262
  // rows of 512); 784 = 262 + 262 + 260. min_block_size 100000: w2
  // (262144) in 2 blocks, not 3.
  const auto layout = layout_of(mlp_sample("distributed.pservers=4,0,2;distributed.trainers=2;"
                                           "distributed.min_block_size=100000"),
                                5);
  CHECK(layout.pservers == std::vector<int>{4, 0, 2});
  CHECK(layout.trainers == std::vector<int>{1, 3});
  CHECK(blocks_text(layout) ==
        "w1.block0 0+262 134144@4; w1.block1 262+262 134144@0; w1.block2 524+260 133120@2; b1.block0 0+512 512@4; "
        "w2.block0 0+256 131072@0; w2.block1 256+256 131072@2; b2.block0 0+512 512@4; w3.block0 0+512 5120@0; "
        "b3.block0 0+10 10@2; ");
}

TEST_CASE("pserver layout: slice_var_up false keeps every variable whole; HashName picks by the block's name") {
  const auto whole = layout_of(mlp_sample("distributed.slice_var_up=false"), 4);
  CHECK(blocks_text(whole) ==
        "w1.block0 0+784 401408@0; b1.block0 0+512 512@1; w2.block0 0+512 262144@0; b2.block0 0+512 512@1; "
        "w3.block0 0+512 5120@0; b3.block0 0+10 10@1; ");
  // FNV-1a (64 bits) of the block's name modulo 2: the same on every node
  // and build. The picks, worked out apart from Rill (Python's FNV-1a):
  // w1.block0 0, w1.block1 1, b1.block0 1, w2.block0 1, w2.block1 0,
  // b2.block0 0, w3.block0 0, b3.block0 1.
  const auto hashed = layout_of(mlp_sample("distributed.split_method=HashName"), 4);
  // Over 3 pservers, where the hash's basis shows (modulo 2 it does not):
  // w1.block0 2, w1.block1 0, w1.block2 0, b1.block0 0, w2.block0 0,
  // w2.block1 2, w2.block2 1, b2.block0 2, w3.block0 1, b3.block0 2.
  CHECK(blocks_text(layout_of(
            mlp_sample("distributed.split_method=HashName;distributed.pservers=0,1,2;distributed.trainers=3"), 6)) ==
        "w1.block0 0+262 134144@2; w1.block1 262+262 134144@0; w1.block2 524+260 133120@0; b1.block0 0+512 512@0; "
        "w2.block0 0+171 87552@0; w2.block1 171+171 87552@2; w2.block2 342+170 87040@1; b2.block0 0+512 512@2; "
        "w3.block0 0+512 5120@1; b3.block0 0+10 10@2; ");
  CHECK(blocks_text(hashed) ==
        "w1.block0 0+392 200704@0; w1.block1 392+392 200704@1; b1.block0 0+512 512@1; w2.block0 0+256 131072@1; "
        "w2.block1 256+256 131072@0; b2.block0 0+512 512@0; w3.block0 0+512 5120@0; b3.block0 0+10 10@1; ");
  // Not round robin: at least two neighbouring blocks share a pserver.
  bool shared = false;
  for (size_t i = 1; i < hashed.blocks.size(); ++i) shared = shared || hashed.blocks[i].pserver == hashed.blocks[i - 1].pserver;
  CHECK(shared);
}

TEST_CASE("pserver layout: 20 pservers and 50 trainers, as the seed's example") {
  std::string pservers;
  for (int i = 0; i < 20; ++i) pservers += fmt::format("{}{}", i ? "," : "", i);
  graph::Job job = mlp_sample("distributed.pservers=" + pservers + ";distributed.trainers=50");
  const auto layout = layout_of(job, 70);
  CHECK(layout.trainers.size() == 50);
  // w1: 20 blocks of 40 rows (20071 elements rounded up to 20480), the last 24.
  int w1_blocks = 0;
  for (const auto& b : layout.blocks)
    if (b.variable == "w1") ++w1_blocks;
  CHECK(w1_blocks == 20);
  CHECK(layout.blocks[19].rows == 24);
  CHECK(compiler::describe_pserver_layout(layout, job).find("w1.block19") != std::string::npos);
  // Node 0's plan (a pserver) and node 69's (a trainer) compile.
  auto cluster = compiler::parse_devices("cpu:1", 70);
  REQUIRE(cluster.ok());
  for (int node : {0, 69}) {
    auto plan = compiler::compile(job, *cluster, {.steps = 1, .node = node});
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  }
}

TEST_CASE("pserver layout errors name what is wrong") {
  auto error = [](const std::string& overrides, int nodes) {
    auto cluster = compiler::parse_devices("cpu:1", nodes);
    REQUIRE(cluster.ok());
    auto layout = compiler::pserver_layout(mlp_sample(overrides), *cluster);
    REQUIRE(!layout.ok());
    return layout.status().message();
  };
  CHECK(error("distributed.pservers=0,7", 4).find("node 7 is not in the cluster's nodes 0 to 3") != std::string::npos);
  CHECK(error("distributed.pservers=1,1", 4).find("node 1 is named twice") != std::string::npos);
  CHECK(error("distributed.pservers=0,1;distributed.trainers=0", 2).find("no node is left to train") !=
        std::string::npos);
  CHECK(error("distributed.trainers=3", 4).find("leave 2 trainers (nodes 2, 3)") != std::string::npos);
  CHECK(error("distributed.pservers=10.0.0.1:9988", 4).find("'10.0.0.1:9988' is not a node number") !=
        std::string::npos);
}

// compile_ok also compiles each node's plan alone and compares it with the
// whole plan's cut, field for field: the lanes and the lookup's blocks are
// numbered alike everywhere.
TEST_CASE("async and lookup-table plans: lanes per trainer rank; every node compiles its own part alike") {
  graph::Job async = mlp_sample("distributed.sync_mode=false;distributed.enable_dc_asgd=true");
  async.eval.reset();
  const std::string bytes = compile_ok(async, "cpu:2", {.steps = 2}, 4);
  const plan::Plan& plan = *plan_of(bytes);
  int lanes = 0;
  for (const plan::Task* t : tasks_of_kind(plan, plan::TaskKind::Variable)) {
    CAPTURE(t->name()->str());
    CHECK(t->variable()->lanes() == 4);  // 2 trainer nodes x cpu:2
    CHECK(t->inputs()->size() == 4);
    CHECK(t->outputs()->size() == 4);
    CHECK(t->variable()->dc_asgd_lambda() == compiler::kDcAsgdLambda);
    ++lanes;
  }
  CHECK(lanes == 8);
  for (const plan::Task* t : tasks_of_kind(plan, plan::TaskKind::Boxing))
    CHECK(testing::sbp_string(t->boxing()->in_sbp()) != "P");  // no summing move: each lane's gradient is read as is
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto lookup = graph::load_job_file(std::string(root ? root : ".") + "/samples/pserver/ctr_lookup.json");
  REQUIRE(lookup.ok());
  lookup->eval.reset();
  (void)compile_ok(*lookup, "cpu:1", {.steps = 2}, 4);
}

// What a pserver does for the trainers, by the threads it runs on
// (distributed.rpc_*_thread_num; thread numbers are comm threads 5 on).
std::map<std::string, std::set<uint32_t>> rpc_threads(const plan::Plan& plan, int pservers) {
  std::map<std::string, std::set<uint32_t>> threads;  // service -> (node << 8 | comm thread)
  for (const plan::Task* t : *plan.tasks()) {
    if (t->node() >= pservers || t->kind() == plan::TaskKind::Sink) continue;
    CAPTURE(t->name()->str());
    REQUIRE(ActorId::device_type(t->id()) == DeviceType::kComm);  // nothing on the device's own thread
    const std::string name = t->name()->str();
    const std::string service = t->kind() == plan::TaskKind::Variable                 ? "get"
                                : name.find("grad") != std::string::npos              ? "send"
                                                                                      : "prefetch";
    threads[service].insert(t->node() << 8 | ActorId::device(t->id()));
  }
  return threads;
}

TEST_CASE("a pserver serves sends, gets and prefetches on threads of their own, as many as the flags say") {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto lookup = graph::load_job_file(std::string(root ? root : ".") + "/samples/pserver/ctr_lookup.json",
                                     {"distributed.rpc_send_thread_num=2", "distributed.rpc_get_thread_num=3",
                                      "distributed.rpc_prefetch_thread_num=2"});
  REQUIRE(lookup.ok());
  lookup->eval.reset();
  // Every node compiles its own part alike (compile_ok), threads included.
  const std::string bytes = compile_ok(*lookup, "cpu:1", {.steps = 2}, 4);
  auto threads = rpc_threads(*plan_of(bytes), 2);
  // Sends on comm threads 5-6, gets 7-9 (7 blocks: node 0 holds 4, node 1
  // 3), prefetches 10-11, each pool dealt round-robin on each pserver.
  CHECK(threads["send"] == std::set<uint32_t>{5, 6, 256 | 5, 256 | 6});
  CHECK(threads["get"] == std::set<uint32_t>{7, 8, 9, 256 | 7, 256 | 8, 256 | 9});
  CHECK(threads["prefetch"] == std::set<uint32_t>{10, 11, 256 | 10, 256 | 11});
  // The defaults: one thread each.
  lookup->distributed->rpc_send_thread_num = lookup->distributed->rpc_get_thread_num =
      lookup->distributed->rpc_prefetch_thread_num = 1;
  threads = rpc_threads(*plan_of(compile_ok(*lookup, "cpu:1", {.steps = 2}, 4)), 2);
  CHECK(threads["send"] == std::set<uint32_t>{5, 256 | 5});
  CHECK(threads["get"] == std::set<uint32_t>{6, 256 | 6});
  CHECK(threads["prefetch"] == std::set<uint32_t>{7, 256 | 7});
}

TEST_CASE("a checkpoint gathers the blocks as pieces of their variables") {
  auto cluster = compiler::parse_devices("cpu:1", 4);
  REQUIRE(cluster.ok());
  auto pieces = compiler::variable_pieces(mlp_sample(), *cluster);
  REQUIRE(pieces.ok());
  std::string text;
  for (const auto& p : *pieces) text += fmt::format("{}@{} ", p.name, fmt::join(p.offset, ","));
  CHECK(text == "w1@0,0 w1@392,0 b1@0 w2@0,0 w2@256,0 b2@0 w3@0,0 b3@0 ");
}

TEST_CASE("collective mode (nccl2): every node trains, the plan is plain data parallelism's") {
  graph::Job job = mlp_sample("distributed.mode=nccl2;distributed.pservers=;distributed.trainers=2");
  job.eval.reset();
  graph::Job plain = job;
  plain.distributed.reset();
  CHECK(compile_ok(job, "cpu:1", {.steps = 2}, 2) == compile_ok(plain, "cpu:1", {.steps = 2}, 2));
  auto cluster = compiler::parse_devices("cpu:1", 3);
  REQUIRE(cluster.ok());
  auto wrong = compiler::compile(job, *cluster, {.steps = 2});
  REQUIRE(!wrong.ok());
  CHECK(wrong.status().message().find("every node trains: the cluster has 3") != std::string::npos);
}

TEST_CASE("pserver plans: blocks and their updates on the pservers, the gradient summed there, trainers never meet") {
  graph::Job job = mlp_sample();
  job.eval.reset();
  const std::string bytes = compile_ok(job, "cpu:1", {.steps = 2}, 4);
  const plan::Plan& plan = *plan_of(bytes);
  int blocks = 0;
  for (const plan::Task* t : tasks_of_kind(plan, plan::TaskKind::Variable)) {
    const std::string name = t->name()->str();
    CAPTURE(name);
    CHECK(t->node() < 2);  // every trainable variable lives on a pserver
    CHECK(!t->variable()->update_op()->str().empty());
    if (name.rfind("w1.block", 0) == 0) {
      ++blocks;
      REQUIRE(t->variable()->whole() != nullptr);
      CHECK(t->variable()->whole()->str() == "w1");
      CHECK(t->variable()->whole_offset()->Get(0) == (name == "w1.block0@0" ? 0 : 392));
    }
  }
  CHECK(blocks == 2);
  int summed = 0;
  for (const plan::Task* t : tasks_of_kind(plan, plan::TaskKind::Boxing)) {
    const std::string name = t->name()->str();
    CAPTURE(name);
    // No collective: nothing but moves between the placements.
    CHECK(t->boxing()->origins() != nullptr);
    CHECK((t->boxing()->peers() == nullptr || t->boxing()->peers()->size() == 0));
    if (testing::sbp_string(t->boxing()->in_sbp()) == "P" && t->node() < 2) {
      ++summed;
      CHECK(t->inputs()->size() == 2);  // one piece from each trainer
    }
  }
  CHECK(summed == 8);  // every block's gradient, on its pserver
}

}  // namespace
}  // namespace rill
