// Live membership on real agents: a data-parallel job that loses a node
// (SIGKILL) goes on from the other nodes' memory on the nodes that remain,
// losing at most the step in flight, to the model a run would reach that
// used every node up to that step and the others after; a layout whose
// variables are split across nodes cannot, and says why.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "membership_util.h"
#include "process_util.h"

#include "runtime/cluster/client.h"

namespace {

using rill::testing::Agent;
using rill::testing::read_text;
using rill::testing::root;
using namespace rill::testing::membership;

}  // namespace

// Why bit for bit: the survivors start step E from the variables and
// optimizer state they held after step E (every one the same: replicas of
// one all-reduced model), which a 3-node run of E steps writes to its
// checkpoint too; from there both runs are a 2-node plan of the same job,
// the same kernels on this machine and the same fixed-order sums over the
// same batches (each step's batch is fixed by its number).
TEST_CASE("a data-parallel job that loses a node goes on from the others' memory, to the model of a run on 3 "
          "nodes up to that step and 2 after") {
  const auto dir = fresh_dir("shrink");
  Cluster cluster(dir, "a", 3, 19884);
  REQUIRE(cluster.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 120;

  // Node 2 dies once step 30 is done.
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 2;
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool killed = false;
  std::string status_after;  // the master's status once the job went on without node 2
  std::thread killer([&] {
    if (!lines.wait_for("step     30/", 120)) return;
    kill(cluster[2].pid, SIGKILL);
    killed = true;
    if (!lines.wait_for("going on from step", 60)) return;
    auto watcher = rill::Client::connect("127.0.0.1:19884", 10, /*running=*/true);
    if (auto status = watcher.ok() ? (*watcher)->status() : rill::StatusOr<std::string>(watcher.status()); status.ok())
      status_after = *status;
  });
  auto live = cluster.client->submit_text(job, "mlp.json", options);
  killer.join();
  REQUIRE(live.ok());
  INFO(lines.all());
  INFO(live->result_json);
  REQUIRE(killed);
  REQUIRE(live->status.ok());
  auto result = nlohmann::json::parse(live->result_json);
  REQUIRE(result.contains("restarts"));
  REQUIRE(result["restarts"].size() == 1);
  const auto& r = result["restarts"][0];
  CHECK(r["error"].get<std::string>().find("node 2 (127.0.0.3:19884) lost") == 0);
  CHECK(r["from"] == "memory");
  CHECK(r["nodes"] == 2);
  const int64_t at = r["resumed_from_step"].get<int64_t>();
  // Step 30's loss was out, so every node had begun it: at least step 29
  // was done everywhere.
  CHECK(at >= 29);
  // At most the step in flight is lost.
  CHECK(r["steps_lost"].get<int64_t>() <= 1);
  CHECK(result["steps"] == kSteps);
  CHECK(lines.has(fmt::format("going on from step {} on the 2 node(s) that remain", at)));
  CHECK(lines.has("eval on"));  // the eval pass ran on the nodes that remain
  // Which steps ran on how many nodes, in the result and (while it ran) the status.
  CHECK(result["nodes_from_step"] ==
        nlohmann::json::parse(fmt::format(R"([{{"from_step": 0, "nodes": 3}}, {{"from_step": {}, "nodes": 2}}])", at)));
  INFO(status_after);
  REQUIRE(!status_after.empty());
  if (!nlohmann::json::parse(status_after)["running"].is_null())  // unless it ended first
    CHECK(nlohmann::json::parse(status_after)["running"]["nodes"] == nlohmann::json::array({0, 1}));

  // The reference: the 3 nodes (node 2's agent back) for `at` steps, then 2
  // nodes of another cluster from that checkpoint to the end.
  cluster.restart(2);
  rill::SubmitOptions first = options_for(dir / "reference", at);
  first.max_restarts = 2;  // while node 2 is joining again, an attempt fails at once and waits for it
  run_stretch(cluster, job, "mlp.json", first, From::kStart);
  Cluster pair(dir, "b", 2, 19888);
  REQUIRE(pair.client);
  const std::string second = run_stretch(pair, job, "mlp.json", options_for(dir / "reference", kSteps), From::kLatest);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(result["final_loss"] == nlohmann::json::parse(second)["final_loss"]);
  CHECK(cluster.shut_down() == 0);
  CHECK(pair.shut_down() == 0);
}

// The mirrored view (DDP) keeps each rank's batch: after a loss the nodes
// that remain train on a global batch of 2 ranks' batches, not 3. Bit for
// bit as in the consistent view: the survivors start from the model they
// all hold after step E (replicas, averaged alike), which a 3-node run of E
// steps checkpoints too; from there both are a 2-rank plan over the same
// ranks' batches (each rank's batch is fixed by the step and its rank).
TEST_CASE("the mirrored view (DDP) goes on from memory after a lost node, each rank with its own batch") {
  const auto dir = fresh_dir("mirrored");
  Cluster cluster(dir, "m", 3, 19902);
  REQUIRE(cluster.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 80;
  auto mirrored = [](rill::SubmitOptions options) {
    options.overrides.push_back("train.view=mirrored");
    options.overrides.push_back("train.batch_size=64");  // each rank's
    return options;
  };
  rill::SubmitOptions options = mirrored(options_for(dir / "live", kSteps));
  options.min_nodes = 2;
  const auto run = submit_killing(cluster, job, "mlp.json", options, 2, 20);
  auto& live = run->ran;
  REQUIRE(live.ok());
  INFO(run->lines.all());
  INFO(live->result_json);
  REQUIRE(run->killed);
  REQUIRE(live->status.ok());
  auto result = nlohmann::json::parse(live->result_json);
  REQUIRE(result["restarts"].size() == 1);
  const auto& r = result["restarts"][0];
  CHECK(r["from"] == "memory");
  CHECK(r["nodes"] == 2);
  CHECK(r["steps_lost"].get<int64_t>() <= 1);
  const int64_t at = r["resumed_from_step"].get<int64_t>();
  CHECK(at >= 19);
  CHECK(result["steps"] == kSteps);
  CHECK(result["global_batch"] == 128);  // the last attempt's: 2 ranks of 64
  CHECK(result["nodes_from_step"] ==
        nlohmann::json::parse(fmt::format(R"([{{"from_step": 0, "nodes": 3}}, {{"from_step": {}, "nodes": 2}}])", at)));

  // The reference: 3 nodes for `at` steps, then 2 from that checkpoint.
  cluster.restart(2);
  rill::SubmitOptions first = mirrored(options_for(dir / "reference", at));
  first.max_restarts = 2;  // while node 2 is joining again, an attempt fails at once and waits for it
  run_stretch(cluster, job, "mlp.json", first, From::kStart);
  Cluster pair(dir, "n", 2, 19906);
  REQUIRE(pair.client);
  run_stretch(pair, job, "mlp.json", mirrored(options_for(dir / "reference", kSteps)), From::kLatest);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(cluster.shut_down() == 0);
  CHECK(pair.shut_down() == 0);
}

// Without replicas (--replica-every 0) a layout that splits variables has
// a lost node's pieces nowhere else (membership_replica_test.cc: with them).
TEST_CASE("a job whose variables are split across nodes, without replicas, cannot go on without a lost node, and "
          "says why") {
  const auto dir = fresh_dir("split");
  Cluster cluster(dir, "p", 2, 19892);
  REQUIRE(cluster.client);
  rill::SubmitOptions options;
  options.steps = 200;
  options.min_nodes = 1;
  options.replica_every = 0;
  options.overrides = {"train.log_every=1"};
  const auto killed = submit_killing(cluster, read_text(root() + "/samples/mlp/mlp_pipeline.json"),
                                     "mlp_pipeline.json", options, 1, 10);
  auto& run = killed->ran;
  REQUIRE(run.ok());
  INFO(killed->lines.all());
  REQUIRE(killed->killed);
  CHECK_FALSE(run->status.ok());
  CHECK(run->status.message().find("node 1 (127.0.0.2:19892) lost") != std::string::npos);
  CHECK(killed->lines.has("cannot go on without the lost node"));
  CHECK(killed->lines.has("does not hold every variable whole"));
  CHECK(cluster.shut_down() == 0);
}

// 3 -> 2 -> 3: node 2 dies, the job goes on with 2 nodes, its agent comes
// back, and at the next step boundary it joins with node 0's memory. The
// reference runs the same three stretches on 3, 2 and 3 nodes through
// checkpoints; bit for bit as above (each stretch a plan of that many
// nodes from the same state).
TEST_CASE("a lost node that comes back joins at a step boundary from node 0's memory: 3 -> 2 -> 3 nodes") {
  const auto dir = fresh_dir("grow");
  Cluster cluster(dir, "c", 3, 19860);
  REQUIRE(cluster.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 400;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 2;
  const auto run = submit_killing(cluster, job, "mlp.json", options, Kill{2, 30, nullptr, 45});
  auto& live = run->ran;
  Lines& lines = run->lines;
  REQUIRE(live.ok());
  INFO(lines.all());
  INFO(live->result_json);
  REQUIRE(run->killed);
  REQUIRE(run->back);
  REQUIRE(live->status.ok());
  auto result = nlohmann::json::parse(live->result_json);
  REQUIRE(result["restarts"].size() == 2);
  const auto& lost = result["restarts"][0];
  const auto& joined = result["restarts"][1];
  CHECK(lost["from"] == "memory");
  CHECK(lost["nodes"] == 2);
  CHECK(lost["steps_lost"].get<int64_t>() <= 1);
  CHECK(joined["error"] == "node 2 (127.0.0.3:19860) joined again");
  CHECK(joined["from"] == "memory");
  CHECK(joined["nodes"] == 3);
  CHECK(joined["steps_lost"] == 0);  // it joins at a step boundary every node reached
  const int64_t shrunk = lost["resumed_from_step"].get<int64_t>(), grown = joined["resumed_from_step"].get<int64_t>();
  CHECK(shrunk < grown);
  CHECK(grown < kSteps);
  CHECK(result["nodes_from_step"] ==
        nlohmann::json::parse(fmt::format(
            R"([{{"from_step": 0, "nodes": 3}}, {{"from_step": {}, "nodes": 2}}, {{"from_step": {}, "nodes": 3}}])",
            shrunk, grown)));
  CHECK(lines.has(fmt::format("node 2 (127.0.0.3:19860) back: going on from step {} on 3 node(s)", grown)));

  // The reference, through checkpoints: 3 nodes to `shrunk`, 2 (another
  // cluster) to `grown`, 3 to the end.
  const std::filesystem::path reference = dir / "reference";
  run_stretch(cluster, job, "mlp.json", options_for(reference, shrunk), From::kStart);
  Cluster pair(dir, "d", 2, 19864);
  REQUIRE(pair.client);
  run_stretch(pair, job, "mlp.json", options_for(reference, grown), From::kLatest);
  run_stretch(cluster, job, "mlp.json", options_for(reference, kSteps), From::kLatest);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(reference, kSteps));
  CHECK(cluster.shut_down() == 0);
  CHECK(pair.shut_down() == 0);
}

// The seeds' linear regression on `rill run --nodes 3 --min-nodes 2
// --max-restarts`: an agent killed about every second and a half, started
// again by its supervisor, joining again at a step boundary; the job goes
// on from memory each time (never from disk: it has no checkpoints) and
// ends where the seeds' does, w = [2, 3].
TEST_CASE("the linear regression goes on through a kill every 1.5 s, to w = [2, 3]") {
  const auto dir = fresh_dir("regression");
  std::atomic<bool> ended{false};
  std::atomic<int> kills{0};
  std::thread killer([&] {
    // Once node 1 has built its part, training is under way: from then on
    // a node's memory holds a step.
    for (int i = 0; i < 6000 && !ended; ++i) {
      if (read_text((dir / "node-1.log").string()).find("compiled this node's plan") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int i = 0; i < 4 && !ended; ++i) {
      for (int waited = 0; waited < 150 && !ended; ++waited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const pid_t pid = rill::testing::find_agent(1 + i % 2, 19872);
      if (!ended && pid > 0 && kill(pid, SIGKILL) == 0) ++kills;
    }
  });
  const auto ran = rill::testing::run_rill(
      "run " + root() + "/samples/linear_regression/linear_regression.json --nodes 3 --min-nodes 2 --max-restarts 8 "
      "--steps 40000 --set train.log_every=2000 --ctrl-port 19872 --logdir " + dir.string() + " --result " +
      (dir / "r.json").string());
  ended = true;
  killer.join();
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  CHECK(kills >= 2);
  auto result = nlohmann::json::parse(read_text((dir / "r.json").string()));
  REQUIRE(result["restarts"].size() >= 2);
  for (const auto& r : result["restarts"]) CHECK(r["from"] == "memory");
  // Converged: from any start, sgd on these 4 exact samples reaches the
  // least-squares solution [2, 3] within float's rounding long before
  // 40000 steps; a lost step or a change of nodes only delays it.
  const auto& w = result["variables"]["w"]["values"];
  CHECK(w[0].get<double>() == doctest::Approx(2.0).epsilon(1e-4));
  CHECK(w[1].get<double>() == doctest::Approx(3.0).epsilon(1e-4));
}

TEST_CASE("--min-nodes outside a cluster, or past its nodes, is refused, naming what it needs") {
  const auto one = rill::testing::run_rill("run " + root() +
                                           "/samples/linear_regression/linear_regression.json --min-nodes 1");
  CHECK(one.code == 1);
  CHECK(one.output.find("--min-nodes keeps a cluster going without a lost node: it needs --nodes N") !=
        std::string::npos);
  const auto zero = rill::testing::run_rill("run " + root() +
                                            "/samples/linear_regression/linear_regression.json --nodes 2 --min-nodes 0");
  CHECK(zero.code != 0);
  const auto many = rill::testing::run_rill(
      "run " + root() + "/samples/linear_regression/linear_regression.json --nodes 2 --min-nodes 3 --ctrl-port 19876");
  INFO(many.output);
  CHECK(many.code != 0);
  CHECK(many.output.find("--min-nodes 3: the cluster has 2 node(s); give 1 to 2") != std::string::npos);
  // Replicas without a job that goes on: refused by the command, and by the
  // master from any client.
  const auto alone = rill::testing::run_rill(
      "run " + root() + "/samples/linear_regression/linear_regression.json --nodes 2 --replica-every 5");
  CHECK(alone.code == 1);
  CHECK(alone.output.find("--replica-every copies each node's pieces for a job that goes on without a lost node: "
                          "it needs --nodes N and --min-nodes below N") != std::string::npos);
  // --min-nodes as many as the nodes: no node may be lost, so no replica would serve.
  const auto all = rill::testing::run_rill("run " + root() +
                                           "/samples/linear_regression/linear_regression.json --nodes 2 --min-nodes 2 "
                                           "--replica-every 5");
  CHECK(all.code == 1);
  CHECK(all.output.find("it needs --nodes N and --min-nodes below N") != std::string::npos);
  const auto copies = rill::testing::run_rill(
      "run " + root() + "/samples/linear_regression/linear_regression.json --nodes 2 --replica-copies 2");
  CHECK(copies.code == 1);
  CHECK(copies.output.find("--replica-copies copies each node's pieces for a job that goes on without a lost node: "
                           "it needs --nodes N and --min-nodes below N") != std::string::npos);
  // More copies than other nodes: refused by the master.
  const auto more = rill::testing::run_rill("run " + root() +
                                            "/samples/linear_regression/linear_regression.json --nodes 2 --min-nodes 1 "
                                            "--replica-copies 2 --ctrl-port 19880");
  INFO(more.output);
  CHECK(more.code != 0);
  CHECK(more.output.find("--replica-copies 2: each node's pieces go to at most the 1 other node(s)") !=
        std::string::npos);
  Agent master("--machines 127.0.0.1:19956 --join-timeout 30 --rank 0", (fresh_dir("replicas-alone") / "a.log").string());
  auto client = rill::Client::connect("127.0.0.1:19956", 30);
  REQUIRE(client.ok());
  rill::SubmitOptions options;
  options.replica_every = 5;
  auto refused = (*client)->submit_text(read_text(root() + "/samples/linear_regression/linear_regression.json"),
                                        "linear_regression.json", options);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("--replica-every 5 copies each node's pieces for a job that goes on "
                                        "without a lost node: it needs --min-nodes N below the cluster's 1 node(s)") !=
        std::string::npos);
  options.min_nodes = 1;  // all of this cluster's nodes
  refused = (*client)->submit_text(read_text(root() + "/samples/linear_regression/linear_regression.json"),
                                   "linear_regression.json", options);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("it needs --min-nodes N below the cluster's 1 node(s)") != std::string::npos);
  rill::SubmitOptions two_copies;
  two_copies.replica_copies = 2;
  refused = (*client)->submit_text(read_text(root() + "/samples/linear_regression/linear_regression.json"),
                                   "linear_regression.json", two_copies);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("--replica-copies 2 copies each node's pieces for a job that goes on "
                                        "without a lost node: it needs --min-nodes N below the cluster's 1 node(s)") !=
        std::string::npos);
  (void)(*client)->shutdown();
  CHECK(master.wait(15) == 0);
}
