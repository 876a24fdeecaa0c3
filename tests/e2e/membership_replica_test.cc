// Live membership for layouts that split variables across nodes, on real
// agents: every node copies its pieces to the next node's memory every few
// steps (runtime/cluster/replicator.h), and a job that loses a node (SIGKILL)
// goes on from the survivors' own pieces and the lost node's replica,
// gathered by node 0 (master_gather.cc), without reading a checkpoint.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "graph/job_file.h"
#include "membership_util.h"
#include "process_util.h"

namespace {

using rill::testing::Agent;
using rill::testing::read_text;
using rill::testing::root;
using namespace rill::testing::membership;

}  // namespace

// 3 -> 2 -> 3: node 1 dies, the job goes on from the replicas on 2 nodes,
// node 1's agent comes back and is taken back at a replica step. Why bit
// for bit: each stretch starts from the variables and the ZeRO shards of
// Adam's state as they stood after its first step (the survivors' own
// pieces and the lost node's replica, or every node's own: the same f32
// bits the nodes held), which a run of that many nodes writes to its
// checkpoint there; from there both are a plan of the same job on as many
// nodes from the same values, the same kernels on this machine and the
// same fixed-order sums over the same batches (each step's batch is fixed
// by its number).
TEST_CASE("ZeRO on 3 nodes loses a node, goes on from the replicas in memory and takes the node back at a replica "
          "step, to the model of a run on 3, 2 and 3 nodes over those stretches") {
  const auto dir = fresh_dir("replica-zero");
  Cluster live(dir, "a", 3, 19932);
  REQUIRE(live.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 120;

  // Node 1 dies once step 35 is done: its pieces live on in node 2's
  // memory. Its agent comes back once the 2 nodes have run some steps.
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.overrides.push_back("train.zero=true");
  options.min_nodes = 2;
  const auto run = submit_killing(live, job, "mlp.json", options, Kill{1, 35, nullptr, 42});
  const auto& ran = run->ran;
  Lines& lines = run->lines;
  REQUIRE(ran.ok());
  INFO(lines.all());
  INFO(ran->result_json);
  REQUIRE(run->killed);
  REQUIRE(run->back);
  REQUIRE(ran->status.ok());
  auto result = nlohmann::json::parse(ran->result_json);
  REQUIRE(result["restarts"].size() == 2);
  const auto& r = result["restarts"][0];
  CHECK(r["error"].get<std::string>().find("node 1 (127.0.0.2:19932) lost") == 0);
  CHECK(r["from"] == "memory");
  CHECK(r["nodes"] == 2);
  // Replicas every 10 steps (the default for ZeRO): the newest one every
  // node held when node 1 died, at step 35 or just after.
  const int64_t at = r["resumed_from_step"].get<int64_t>();
  CHECK((at == 30 || at == 20));
  CHECK(result["steps"] == kSteps);
  CHECK(lines.has(fmt::format("going on from step {} on the 2 node(s) that remain, from the replicas in memory", at)));
  // Taken back at a multiple of 10 (the phase ends there, where every node
  // holds its own pieces), nothing lost.
  const auto& joined = result["restarts"][1];
  CHECK(joined["error"] == "node 1 (127.0.0.2:19932) joined again");
  CHECK(joined["from"] == "memory");
  CHECK(joined["nodes"] == 3);
  CHECK(joined["steps_lost"] == 0);
  const int64_t grown = joined["resumed_from_step"].get<int64_t>();
  CHECK(grown % 10 == 0);
  CHECK(at < grown);
  CHECK(grown < kSteps);
  CHECK(lines.has(fmt::format("node 1 (127.0.0.2:19932) back: going on from step {} on 3 node(s), from the "
                              "replicas in memory",
                              grown)));
  CHECK(result["nodes_from_step"] ==
        nlohmann::json::parse(fmt::format(
            R"([{{"from_step": 0, "nodes": 3}}, {{"from_step": {}, "nodes": 2}}, {{"from_step": {}, "nodes": 3}}])",
            at, grown)));
  // Node 0 gathered node 1's pieces from node 2, and node 2 started from node 0's memory.
  CHECK(live.log(0).find(fmt::format("node 0 gathered the model after step {}", at)) !=
        std::string::npos);
  CHECK(live.log(2).find("and the replicas it holds") != std::string::npos);
  CHECK(live.log(2).find(fmt::format("took node 0's memory at step {}", at)) !=
        std::string::npos);

  // The reference, through checkpoints: 3 nodes to `at`, 2 (another
  // cluster) to `grown`, 3 to the end.
  const auto zero = [&](int64_t steps) {
    rill::SubmitOptions o = options_for(dir / "reference", steps);
    o.overrides.push_back("train.zero=true");
    return o;
  };
  run_stretch(live, job, "mlp.json", zero(at), From::kStart);
  Cluster pair(dir, "b", 2, 19936);
  REQUIRE(pair.client);
  run_stretch(pair, job, "mlp.json", zero(grown), From::kLatest);
  const std::string last = run_stretch(live, job, "mlp.json", zero(kSteps), From::kLatest);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(result["final_loss"] == nlohmann::json::parse(last)["final_loss"]);
  CHECK(live.shut_down() == 0);
  CHECK(pair.shut_down() == 0);
}

// The model parallel MLP (its layers split across the nodes by hints, so
// replicas only when asked: --replica-every) loses its last node, whose
// replica node 0 holds (the ring closes on node 0), and goes on on 2 nodes
// from that replica and node 1's own pieces: bit for bit a run resumed on
// 2 nodes from a 3-node checkpoint of that step (the same values, then the
// same 2-node plan).
TEST_CASE("the model parallel MLP loses its last node and goes on from its replica on node 0, when asked for "
          "replicas") {
  const auto dir = fresh_dir("replica-model-parallel");
  Cluster live(dir, "m", 3, 19940);
  REQUIRE(live.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp_model_parallel.json");
  constexpr int64_t kSteps = 60;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 2;
  options.replica_every = 5;
  const auto run = submit_killing(live, job, "mlp_model_parallel.json", options, 2, 22);
  auto& ran = run->ran;
  REQUIRE(ran.ok());
  INFO(run->lines.all());
  INFO(ran->result_json);
  REQUIRE(run->killed);
  REQUIRE(ran->status.ok());
  auto result = nlohmann::json::parse(ran->result_json);
  REQUIRE(result["restarts"].size() == 1);
  const int64_t at = result["restarts"][0]["resumed_from_step"].get<int64_t>();
  CHECK(at % 5 == 0);
  CHECK((at >= 15 && at <= 25));
  CHECK(result["restarts"][0]["nodes"] == 2);
  CHECK(result["steps"] == kSteps);
  CHECK(live.log(0).find(fmt::format("node 0 gathered the model after step {}", at)) !=
        std::string::npos);

  // The reference: 3 nodes for `at` steps, then 2 nodes of another cluster.
  live.restart(2);
  rill::SubmitOptions first = options_for(dir / "reference", at);
  first.max_restarts = 2;  // while node 2 is joining again, an attempt fails at once and waits for it
  run_stretch(live, job, "mlp_model_parallel.json", first, From::kStart);
  Cluster pair(dir, "r", 2, 19944);
  REQUIRE(pair.client);
  run_stretch(pair, job, "mlp_model_parallel.json", options_for(dir / "reference", kSteps), From::kLatest);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(live.shut_down() == 0);
  CHECK(pair.shut_down() == 0);
}

// The GPT sample with ZeRO on 2 nodes at a batch of one sequence a node: each
// node's replica (its share of the variables and of AdamW's state, about 5
// MB) moves in 1 MiB chunks, larger than any message of the plan itself,
// which the run's bounds on its data plane make room for. Node 1 dies; node
// 0 held its replica and goes on alone, bit for bit a run resumed on 1 node
// from a 2-node checkpoint of that step.
TEST_CASE("the GPT sample with ZeRO goes on alone from the replica of the node it lost") {
  const auto dir = fresh_dir("replica-gpt");
  Cluster live(dir, "g", 2, 19948);
  REQUIRE(live.client);
  // The text in the test's own folder (under /tmp, a data root of every agent).
  std::filesystem::copy_file(root() + "/data/moby-dick.txt", dir / "moby-dick.txt");
  const std::string sample = root() + "/samples/gpt/gpt_moby_short.json";
  auto resolved = rill::graph::resolve_includes(read_text(sample), sample);  // as rill submit sends it
  REQUIRE(resolved.ok());
  std::string job = *resolved;
  for (size_t at = job.find("data/moby-dick.txt"); at != std::string::npos; at = job.find("data/moby-dick.txt", at))
    job.replace(at, std::string("data/moby-dick.txt").size(), (dir / "moby-dick.txt").string());
  const std::vector<std::string> layout = {"train.zero=true", "train.batch_size=2", "eval=off", "generate=off"};
  constexpr int64_t kSteps = 40;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.overrides.insert(options.overrides.end(), layout.begin(), layout.end());
  options.min_nodes = 1;
  const auto run = submit_killing(live, job, "gpt_moby_short.json", options, 1, 25);
  auto& ran = run->ran;
  REQUIRE_MESSAGE(ran.ok(), ran.status().to_string());
  INFO(run->lines.all());
  INFO(ran->result_json);
  REQUIRE(run->killed);
  REQUIRE(ran->status.ok());
  auto result = nlohmann::json::parse(ran->result_json);
  REQUIRE(result["restarts"].size() == 1);
  const int64_t at = result["restarts"][0]["resumed_from_step"].get<int64_t>();
  CHECK((at == 20 || at == 10));
  CHECK(result["restarts"][0]["nodes"] == 1);
  CHECK(result["steps"] == kSteps);
  CHECK(live.log(0).find(fmt::format("node 0 gathered the model after step {}", at)) !=
        std::string::npos);

  // The reference: 2 nodes for `at` steps, then node 0's agent alone.
  live.restart(1);
  rill::SubmitOptions first = options_for(dir / "reference", at);
  first.overrides.insert(first.overrides.end(), layout.begin(), layout.end());
  first.max_restarts = 2;  // while node 1 is joining again, an attempt fails at once and waits for it
  run_stretch(live, job, "gpt_moby_short.json", first, From::kStart);
  Cluster alone(dir, "h", 1, 19952);
  REQUIRE(alone.client);
  rill::SubmitOptions second = options_for(dir / "reference", kSteps);
  second.overrides.insert(second.overrides.end(), layout.begin(), layout.end());
  run_stretch(alone, job, "gpt_moby_short.json", second, From::kLatest);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(live.shut_down() == 0);
  CHECK(alone.shut_down() == 0);
}

// A replica lives on one node: a node lost with the node after it (its
// buddy) leaves its pieces nowhere, and the job says so (with
// --max-restarts it would restart from disk).
TEST_CASE("ZeRO that loses a node and the node holding its replica cannot go on, and says why") {
  const auto dir = fresh_dir("replica-both");
  Cluster cluster(dir, "z", 3, 19960);
  REQUIRE(cluster.client);
  rill::SubmitOptions options = options_for(dir / "live", 200);
  options.overrides.push_back("train.zero=true");
  options.min_nodes = 1;
  const auto killed = submit_killing(cluster, read_text(root() + "/samples/mlp/mlp.json"), "mlp.json", options,
                                     Kill{.victim = 1, .step = 25, .with = 2});
  auto& run = killed->ran;
  Lines& lines = killed->lines;
  REQUIRE(run.ok());
  INFO(lines.all());
  REQUIRE(killed->killed);
  CHECK_FALSE(run->status.ok());
  CHECK(lines.has("cannot go on without the lost node"));
  CHECK(lines.has("is lost, and so is node 2 (127.0.0.3:19960), which held its replica"));
  CHECK(cluster.shut_down() == 0);
}

// The same loss with two copies of each node's pieces (--replica-copies 2):
// node 0 holds nodes 1's and 2's replicas and goes on alone from memory.
// Why bit for bit a run of 3 nodes to that step resumed on 1 from its
// checkpoint: node 0's own pieces and its two replicas are the f32 bits the
// 3 nodes held after that step, which the 3-node run writes to its
// checkpoint there; from there both are the 1-node plan of the same job
// from the same values (same kernels on this machine, same batches).
TEST_CASE("ZeRO with two copies of each replica loses two nodes at once and goes on alone from memory, to the model "
          "of a run on 3 then 1 node") {
  const auto dir = fresh_dir("replica-copies");
  Cluster cluster(dir, "k", 3, 19980);
  REQUIRE(cluster.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 80;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.overrides.push_back("train.zero=true");
  options.min_nodes = 1;
  options.replica_copies = 2;
  const auto killed = submit_killing(cluster, job, "mlp.json", options, Kill{.victim = 1, .step = 25, .with = 2});
  auto& run = killed->ran;
  Lines& lines = killed->lines;
  REQUIRE(run.ok());
  INFO(lines.all());
  INFO(run->result_json);
  REQUIRE(killed->killed);
  REQUIRE(run->status.ok());
  auto result = nlohmann::json::parse(run->result_json);
  REQUIRE(result["restarts"].size() == 1);
  const auto& r = result["restarts"][0];
  CHECK(r["from"] == "memory");
  CHECK(r["nodes"] == 1);
  const int64_t at = r["resumed_from_step"].get<int64_t>();
  CHECK((at == 20 || at == 10));  // replicas every 10 steps, the newest all held when they died
  CHECK(result["steps"] == kSteps);
  CHECK(lines.has(fmt::format("going on from step {} on the 1 node(s) that remain, from the replicas in memory", at)));
  CHECK(cluster.log(0).find(fmt::format("node 0 gathered the model after step {}", at)) != std::string::npos);

  const auto zero = [&](int64_t steps) {
    rill::SubmitOptions o = options_for(dir / "reference", steps);
    o.overrides.push_back("train.zero=true");
    return o;
  };
  Cluster three(dir, "l", 3, 19984);
  REQUIRE(three.client);
  run_stretch(three, job, "mlp.json", zero(at), From::kStart);
  Cluster alone(dir, "m", 1, 19988);
  REQUIRE(alone.client);
  const std::string last = run_stretch(alone, job, "mlp.json", zero(kSteps), From::kLatest);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(result["final_loss"] == nlohmann::json::parse(last)["final_loss"]);
  CHECK(cluster.shut_down() == 0);
  CHECK(three.shut_down() == 0);
  CHECK(alone.shut_down() == 0);
}

// A loss before the first replica step: every node copied the values its
// run started from before its first update, so the job goes on from step 0
// in memory, not from disk. Why bit for bit a 2-node run from the start:
// the survivors' own pieces and the lost node's replica at step 0 are the
// initial values and Adam's zero state, the same bits a 2-node run starts
// from, and from there both are a plan of the same job on 2 nodes (same
// kernels on this machine, same fixed-order sums over the same batches).
TEST_CASE("ZeRO that loses a node before its first replica step goes on from the copies of its start") {
  const auto dir = fresh_dir("replica-start");
  Cluster live(dir, "s", 3, 19972);
  REQUIRE(live.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 30;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.overrides.push_back("train.zero=true");
  options.min_nodes = 2;
  options.replica_every = 1000;  // past the job's end: the start's copies are the only ones
  // The kill comes once node 0 (node 2's buddy) holds the copy of node 2's
  // start, which goes while training goes on: a loss before it arrives
  // finds node 2's pieces nowhere, and the job cannot go on from memory.
  const auto run = submit_killing(live, job, "mlp.json", options, Kill{2, 3, [&] {
    return live.log(0).find("holds its first copy of node 2's pieces") != std::string::npos;
  }});
  auto& ran = run->ran;
  REQUIRE(ran.ok());
  INFO(run->lines.all());
  INFO(ran->result_json);
  REQUIRE(run->killed);
  REQUIRE(ran->status.ok());
  auto result = nlohmann::json::parse(ran->result_json);
  REQUIRE(result["restarts"].size() == 1);
  const auto& r = result["restarts"][0];
  CHECK(r["error"].get<std::string>().find("node 2 (127.0.0.3:19972) lost") == 0);
  CHECK(r["from"] == "memory");
  CHECK(r["resumed_from_step"] == 0);
  CHECK(result["steps"] == kSteps);
  CHECK(run->lines.has("going on from step 0 on the 2 node(s) that remain, from the replicas in memory"));
  CHECK(live.log(0).find("node 0 gathered the model after step 0") != std::string::npos);

  Cluster pair(dir, "t", 2, 19976);
  REQUIRE(pair.client);
  rill::SubmitOptions reference = options_for(dir / "reference", kSteps);
  reference.overrides.push_back("train.zero=true");
  const std::string two = run_stretch(pair, job, "mlp.json", reference, From::kStart);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(result["final_loss"] == nlohmann::json::parse(two)["final_loss"]);
  CHECK(live.shut_down() == 0);
  CHECK(pair.shut_down() == 0);
}

// A pipeline whose stages are placed on named nodes cannot run on fewer:
// the attempt that would go on from the replicas fails to compile, and the
// job takes the way it would without live membership (here no restarts:
// it ends, naming both the loss and why it cannot go on).
TEST_CASE("a pipeline placed on named nodes that loses one cannot run on fewer, and says so") {
  const auto dir = fresh_dir("replica-pipeline");
  Cluster cluster(dir, "p", 2, 19964);
  REQUIRE(cluster.client);
  rill::SubmitOptions options = options_for(dir / "live", 200);
  options.min_nodes = 1;
  options.replica_every = 5;
  const auto killed = submit_killing(cluster, read_text(root() + "/samples/mlp/mlp_pipeline.json"),
                                     "mlp_pipeline.json", options, 1, 12);
  auto& run = killed->ran;
  REQUIRE(run.ok());
  INFO(killed->lines.all());
  REQUIRE(killed->killed);
  CHECK_FALSE(run->status.ok());
  CHECK(run->status.code() == rill::Code::kUnavailable);
  CHECK(run->status.message().find("node 1 (127.0.0.2:19964) lost") != std::string::npos);
  CHECK(run->status.message().find("the job cannot run on the 1 node(s) that remain") != std::string::npos);
  CHECK(run->status.message().find("names node 1, but the cluster has 1 node(s)") != std::string::npos);
  CHECK(cluster.shut_down() == 0);
}

// The same pipeline with a restart allowed (--max-restarts 1): as the job
// finds it cannot run on 1 node, node 0 takes the model of the replica step
// from its own pieces and node 1's replica into its memory; once node 1's
// agent is back the job restarts on both from node 0's memory at that step,
// not from disk (its only checkpoint is the run's end). Why bit for bit a
// 2-node run resumed from a checkpoint of that step: the values node 0
// gathered are the f32 bits the 2 nodes held after it, which that run
// writes to its checkpoint, and from there both are the same 2-node plan
// from the same values (same kernels, same batches).
TEST_CASE("a pipeline placed on named nodes that loses one restarts from the replicas in node 0's memory once the "
          "node is back") {
  pipeline_back_from_memory("replica-pipeline-back", 19992, 19996, "");
}

// A node lost once training is done, in the eval pass: ZeRO's pieces of the
// trained model are spread over the nodes, so node 0 gathers the survivors'
// own pieces and the lost node's replica of the last step (every node
// copies the run's last step too: 25 is no multiple of the 10 between
// replicas) and the eval runs on the 2 nodes that remain from that model,
// with nothing trained again. The eval's batch of 6 makes it long enough
// (1666 steps) for the kill to land in it.
TEST_CASE("ZeRO loses a node in the eval pass: node 0 gathers the trained model from the replicas and the eval goes "
          "on on the nodes that remain") {
  const auto dir = fresh_dir("replica-eval");
  Cluster live(dir, "v", 3, 19968);
  REQUIRE(live.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 25;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.overrides.push_back("train.zero=true");
  options.overrides.push_back("eval.batch_size=6");
  options.min_nodes = 2;
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool killed = false;
  std::thread killer([&] {
    // Once node 2 has its part of the eval (phase 1), training is done.
    if (!until([&] { return live[2].output().find("job 1 phase 1: compiled") != std::string::npos; }, 120)) return;
    kill(live[2].pid, SIGKILL);
    killed = true;
  });
  auto ran = live.client->submit_text(job, "mlp.json", options);
  killer.join();
  REQUIRE(ran.ok());
  INFO(lines.all());
  INFO(ran->result_json);
  REQUIRE(killed);
  REQUIRE(ran->status.ok());
  auto result = nlohmann::json::parse(ran->result_json);
  REQUIRE(result["restarts"].size() == 1);
  CHECK(result["restarts"][0]["from"] == "memory");
  CHECK(result["restarts"][0]["nodes"] == 2);
  CHECK(result["restarts"][0]["steps_lost"] == 0);
  CHECK(result["steps"] == kSteps);
  CHECK(result["eval_samples"] == 9996);  // 1666 whole batches of 6
  CHECK(result["nodes_from_step"] == nlohmann::json::parse(R"([{"from_step": 0, "nodes": 3}])"));
  CHECK(lines.has(fmt::format("training done at step {}: the eval runs on the 2 node(s) that remain", kSteps)));
  CHECK(live.log(0).find(fmt::format("node 0 gathered the model after step {}", kSteps)) !=
        std::string::npos);

  // The reference: the same 25 steps and eval on 3 nodes. The same trained
  // model gives every eval batch the same correct predictions and losses;
  // how 2 or 3 nodes split a batch changes only the rounding of its mean
  // (a few float ulps), which the mean over 1666 batches keeps far below
  // these bounds, while one prediction of 9996 apart moves the accuracy by
  // 1e-4.
  live.restart(2);
  rill::SubmitOptions reference = options_for(dir / "reference", kSteps);
  reference.overrides = options.overrides;
  reference.overrides[0] = "checkpoint.dir=" + (dir / "reference").string();
  reference.max_restarts = 2;  // while node 2 is joining again, an attempt fails at once and waits for it
  const auto expected =
      nlohmann::json::parse(run_stretch(live, job, "mlp.json", reference, From::kStart))["metrics"];
  CHECK(result["metrics"]["accuracy"].get<double>() == doctest::Approx(expected["accuracy"].get<double>()).epsilon(1e-6));
  CHECK(result["metrics"]["loss"].get<double>() == doctest::Approx(expected["loss"].get<double>()).epsilon(1e-5));
  CHECK(result["metrics"]["accuracy"].get<double>() > 0.5);
  CHECK(live.shut_down() == 0);
}
