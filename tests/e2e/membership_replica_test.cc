// Live membership for layouts that split variables across nodes, on real
// agents: every node copies its pieces to the next node's memory every few
// steps (runtime/cluster/replicator.h), and a job that loses a node (SIGKILL)
// goes on from the survivors' own pieces and the lost node's replica,
// gathered by node 0 (master_gather.cc), without reading a checkpoint.
#include <doctest/doctest.h>

#include <signal.h>

#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "membership_util.h"
#include "process_util.h"

namespace {

using rill::testing::Agent;
using rill::testing::read_text;
using rill::testing::root;
using namespace rill::testing::membership;

}  // namespace

// Why bit for bit: the job goes on from the variables and the ZeRO shards
// of Adam's state as they stood after step E (every survivor's own pieces
// and the lost node's replica: the same f32 bits the 3 nodes held), which a
// 3-node run of E steps writes to its checkpoint; from there both runs are
// a 2-node plan of the same job from the same values, the same kernels on
// this machine and the same fixed-order sums over the same batches (each
// step's batch is fixed by its number).
TEST_CASE("ZeRO on 3 nodes loses a node and goes on from the replicas in memory, to the model of a run on 3 nodes "
          "up to that step and 2 after") {
  const auto dir = fresh_dir("replica-zero");
  const std::string machines = "127.0.0.1:19932,127.0.0.2:19932,127.0.0.3:19932";
  const std::string args = "--machines " + machines + " --join-timeout 30 --rank ";
  Agent master(args + "0", (dir / "a0.log").string());
  auto one = std::make_unique<Agent>(args + "1", (dir / "a1.log").string());
  Agent two(args + "2", (dir / "a2.log").string());
  auto client = rill::Client::connect("127.0.0.1:19932", 30);
  REQUIRE(client.ok());
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 120;

  // Node 1 dies once step 35 is done: its pieces live on in node 2's memory.
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.overrides.push_back("train.zero=true");
  options.min_nodes = 2;
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool killed = false;
  std::thread killer([&] {
    if (!lines.wait_for("step     35/", 120)) return;
    kill(one->pid, SIGKILL);
    killed = true;
  });
  auto live = (*client)->submit_text(job, "mlp.json", options);
  killer.join();
  REQUIRE(live.ok());
  INFO(lines.all());
  INFO(live->result_json);
  REQUIRE(killed);
  REQUIRE(live->status.ok());
  auto result = nlohmann::json::parse(live->result_json);
  REQUIRE(result["restarts"].size() == 1);
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
  CHECK(result["nodes_from_step"] ==
        nlohmann::json::parse(fmt::format(R"([{{"from_step": 0, "nodes": 3}}, {{"from_step": {}, "nodes": 2}}])", at)));
  // Node 0 gathered node 1's pieces from node 2, and node 2 started from node 0's memory.
  CHECK(read_text((dir / "a0.log").string()).find(fmt::format("node 0 gathered the model after step {}", at)) !=
        std::string::npos);
  CHECK(read_text((dir / "a2.log").string()).find("and the replicas it holds") != std::string::npos);
  CHECK(read_text((dir / "a2.log").string()).find(fmt::format("took node 0's memory at step {}", at)) !=
        std::string::npos);

  // The reference: the 3 nodes (node 1's agent back) for `at` steps, then 2
  // nodes of another cluster from that checkpoint to the end.
  one = std::make_unique<Agent>(args + "1", (dir / "a1-again.log").string());
  rill::SubmitOptions first = options_for(dir / "reference", at);
  first.overrides.push_back("train.zero=true");
  first.max_restarts = 2;  // while node 1 is joining again, an attempt fails at once and waits for it
  auto part1 = (*client)->submit_text(job, "mlp.json", first);
  REQUIRE(part1.ok());
  INFO(part1->result_json);
  REQUIRE(part1->status.ok());
  const std::string pair = "127.0.0.1:19936,127.0.0.2:19936";
  Agent master2("--machines " + pair + " --join-timeout 30 --rank 0", (dir / "b0.log").string());
  Agent other2("--machines " + pair + " --join-timeout 30 --rank 1", (dir / "b1.log").string());
  auto client2 = rill::Client::connect("127.0.0.1:19936", 30);
  REQUIRE(client2.ok());
  rill::SubmitOptions second = options_for(dir / "reference", kSteps);
  second.overrides.push_back("train.zero=true");
  second.resume = "latest";
  auto part2 = (*client2)->submit_text(job, "mlp.json", second);
  REQUIRE(part2.ok());
  INFO(part2->result_json);
  REQUIRE(part2->status.ok());
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(result["final_loss"] == nlohmann::json::parse(part2->result_json)["final_loss"]);
  (void)(*client)->shutdown();
  (void)(*client2)->shutdown();
  CHECK(master.wait(15) == 0);
  CHECK(master2.wait(15) == 0);
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
  const std::string machines = "127.0.0.1:19940,127.0.0.2:19940,127.0.0.3:19940";
  const std::string args = "--machines " + machines + " --join-timeout 30 --rank ";
  Agent master(args + "0", (dir / "m0.log").string());
  Agent one(args + "1", (dir / "m1.log").string());
  auto two = std::make_unique<Agent>(args + "2", (dir / "m2.log").string());
  auto client = rill::Client::connect("127.0.0.1:19940", 30);
  REQUIRE(client.ok());
  const std::string job = read_text(root() + "/samples/mlp/mlp_model_parallel.json");
  constexpr int64_t kSteps = 60;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 2;
  options.replica_every = 5;
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool killed = false;
  std::thread killer([&] {
    if (!lines.wait_for("step     22/", 120)) return;
    kill(two->pid, SIGKILL);
    killed = true;
  });
  auto live = (*client)->submit_text(job, "mlp_model_parallel.json", options);
  killer.join();
  REQUIRE(live.ok());
  INFO(lines.all());
  INFO(live->result_json);
  REQUIRE(killed);
  REQUIRE(live->status.ok());
  auto result = nlohmann::json::parse(live->result_json);
  REQUIRE(result["restarts"].size() == 1);
  const int64_t at = result["restarts"][0]["resumed_from_step"].get<int64_t>();
  CHECK(at % 5 == 0);
  CHECK((at >= 15 && at <= 25));
  CHECK(result["restarts"][0]["nodes"] == 2);
  CHECK(result["steps"] == kSteps);
  CHECK(read_text((dir / "m0.log").string()).find(fmt::format("node 0 gathered the model after step {}", at)) !=
        std::string::npos);

  // The reference: 3 nodes for `at` steps, then 2 nodes of another cluster.
  two = std::make_unique<Agent>(args + "2", (dir / "m2-again.log").string());
  rill::SubmitOptions first = options_for(dir / "reference", at);
  first.max_restarts = 2;  // while node 2 is joining again, an attempt fails at once and waits for it
  auto part1 = (*client)->submit_text(job, "mlp_model_parallel.json", first);
  REQUIRE(part1.ok());
  INFO(part1->result_json);
  REQUIRE(part1->status.ok());
  const std::string pair = "127.0.0.1:19944,127.0.0.2:19944";
  Agent master2("--machines " + pair + " --join-timeout 30 --rank 0", (dir / "r0.log").string());
  Agent other2("--machines " + pair + " --join-timeout 30 --rank 1", (dir / "r1.log").string());
  auto client2 = rill::Client::connect("127.0.0.1:19944", 30);
  REQUIRE(client2.ok());
  rill::SubmitOptions second = options_for(dir / "reference", kSteps);
  second.resume = "latest";
  auto part2 = (*client2)->submit_text(job, "mlp_model_parallel.json", second);
  REQUIRE(part2.ok());
  INFO(part2->result_json);
  REQUIRE(part2->status.ok());
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  (void)(*client)->shutdown();
  (void)(*client2)->shutdown();
  CHECK(master.wait(15) == 0);
  CHECK(master2.wait(15) == 0);
}
