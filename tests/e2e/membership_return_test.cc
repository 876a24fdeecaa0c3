// Live membership, the nodes that come back and those that are not there:
// a job submitted while a node is down starts on the nodes up; a node lost
// once training is done leaves the eval to the others; a node that comes
// back takes node 0's memory over the data plane, past what a control
// message holds.
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

// A node down when a live job is submitted (killed before, declared lost):
// the job starts on the nodes up instead of failing its first attempt, and
// takes the node back at a step boundary once its agent is started again,
// from node 0's memory, as after a loss.
TEST_CASE("a job submitted while a node is down starts on the nodes up, and takes it back when it comes") {
  const auto dir = fresh_dir("start-short");
  Cluster cluster(dir, "s", 3, 19894);
  REQUIRE(until(
      [&] { return cluster[0].output().find("cluster of 3 node(s) formed") != std::string::npos; }, 60));
  kill(cluster[2].pid, SIGKILL);
  cluster[2].wait(10);
  REQUIRE(until(
      [&] { return cluster[0].output().find("node 2 (127.0.0.3:19894) lost") != std::string::npos; }, 30));
  REQUIRE(cluster.client);
  constexpr int64_t kSteps = 400;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 2;
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool back = false;
  std::thread restarter([&] {
    if (!lines.wait_for("step     20/", 120)) return;
    cluster.restart(2);
    back = true;
  });
  auto live = cluster.client->submit_text(read_text(root() + "/samples/mlp/mlp.json"), "mlp.json", options);
  restarter.join();
  REQUIRE(live.ok());
  INFO(lines.all());
  INFO(live->result_json);
  REQUIRE(back);
  REQUIRE(live->status.ok());
  CHECK(lines.has("node 2 (127.0.0.3:19894) down: starting on the 2 node(s) up"));
  auto result = nlohmann::json::parse(live->result_json);
  REQUIRE(result["restarts"].size() == 1);
  const auto& joined = result["restarts"][0];
  CHECK(joined["error"] == "node 2 (127.0.0.3:19894) joined again");
  CHECK(joined["from"] == "memory");
  CHECK(joined["nodes"] == 3);
  CHECK(joined["steps_lost"] == 0);
  const int64_t grown = joined["resumed_from_step"].get<int64_t>();
  CHECK(grown >= 20);
  CHECK(grown < kSteps);
  CHECK(result["nodes_from_step"] ==
        nlohmann::json::parse(
            fmt::format(R"([{{"from_step": 0, "nodes": 2}}, {{"from_step": {}, "nodes": 3}}])", grown)));
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(cluster.shut_down() == 0);
}

// A layout that splits variables across nodes by its hints (the model
// parallel MLP: w1 in columns over every device) starts on the nodes up
// too, but a node that comes back cannot be taken in: its pieces would come
// from nowhere. The nodes that ran go on as they were, each from its own
// memory, and leave that agent out until it joins again: the model is bit
// for bit the one a run on those 2 nodes alone makes (the second job here,
// with node 2 down again).
TEST_CASE("a node back that a layout splitting variables cannot take: the nodes that ran go on as they were") {
  const auto dir = fresh_dir("not-taken");
  Cluster cluster(dir, "n", 3, 19912);
  // Kills node 2's agent and waits until the master has declared it lost
  // once more.
  auto losses = [&] {
    const std::string log = cluster[0].output(), lost = "node 2 (127.0.0.3:19912) lost";
    int n = 0;
    for (size_t at = log.find(lost); at != std::string::npos; at = log.find(lost, at + 1)) ++n;
    return n;
  };
  auto take_two_down = [&] {
    const int before = losses();
    kill(cluster[2].pid, SIGKILL);
    cluster[2].wait(10);
    return until([&] { return losses() > before; }, 30);
  };
  REQUIRE(until(
      [&] { return cluster[0].output().find("cluster of 3 node(s) formed") != std::string::npos; }, 60));
  REQUIRE(take_two_down());
  REQUIRE(cluster.client);
  constexpr int64_t kSteps = 400;
  const std::string job = read_text(root() + "/samples/mlp/mlp_model_parallel.json");
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 2;
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool back = false;
  std::thread restarter([&] {
    if (!lines.wait_for("step     20/", 120)) return;
    cluster.restart(2);
    back = true;
  });
  auto live = cluster.client->submit_text(job, "mlp_model_parallel.json", options);
  restarter.join();
  REQUIRE(live.ok());
  INFO(lines.all());
  INFO(live->result_json);
  REQUIRE(back);
  REQUIRE(live->status.ok());
  CHECK(lines.has("cannot take back the node that came back"));
  auto result = nlohmann::json::parse(live->result_json);
  CHECK(result["steps"] == kSteps);
  REQUIRE(result["restarts"].size() == 1);
  const auto& kept_on = result["restarts"][0];
  CHECK(kept_on["error"].get<std::string>().find("a node joined again and could not be taken back") == 0);
  CHECK(kept_on["from"] == "memory");
  CHECK(kept_on["nodes"] == 2);
  CHECK(kept_on["steps_lost"] == 0);
  const int64_t went_on = kept_on["resumed_from_step"].get<int64_t>();
  CHECK(result["nodes_from_step"] ==
        nlohmann::json::parse(
            fmt::format(R"([{{"from_step": 0, "nodes": 2}}, {{"from_step": {}, "nodes": 2}}])", went_on)));
  const std::string model = model_bytes(dir / "live", kSteps);
  REQUIRE(!model.empty());
  // The same job on the 2 nodes alone, node 2 down again.
  REQUIRE(take_two_down());
  rill::SubmitOptions alone = options_for(dir / "alone", kSteps);
  alone.min_nodes = 2;
  auto reference = cluster.client->submit_text(job, "mlp_model_parallel.json", alone);
  REQUIRE(reference.ok());
  INFO(reference->result_json);
  REQUIRE(reference->status.ok());
  CHECK(model == model_bytes(dir / "alone", kSteps));
  CHECK(cluster.shut_down() == 0);
}

// A node lost once training is done (in the eval pass, or as the training
// phase ends): nothing is left to train, so the nodes that remain run what
// follows training (the eval) with the trained model from node 0's memory,
// and the result keeps the training's figures. The eval's batch of 6 makes
// it long enough (1666 steps) for the kill to land in it.
TEST_CASE("a node lost in the eval pass: the nodes that remain evaluate the trained model from node 0's memory") {
  const auto dir = fresh_dir("eval-loss");
  Cluster cluster(dir, "e", 3, 19896);
  REQUIRE(cluster.client);
  constexpr int64_t kSteps = 30;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.overrides.push_back("eval.batch_size=6");
  options.min_nodes = 2;
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool killed = false;
  std::thread killer([&] {
    // Once node 2 has its part of the eval (phase 1), training is done.
    if (!until([&] { return cluster[2].output().find("job 1 phase 1: compiled") != std::string::npos; }, 120)) return;
    kill(cluster[2].pid, SIGKILL);
    killed = true;
  });
  auto live = cluster.client->submit_text(read_text(root() + "/samples/mlp/mlp.json"), "mlp.json", options);
  killer.join();
  REQUIRE(live.ok());
  INFO(lines.all());
  INFO(live->result_json);
  REQUIRE(killed);
  REQUIRE(live->status.ok());
  auto result = nlohmann::json::parse(live->result_json);
  REQUIRE(result["restarts"].size() == 1);
  CHECK(result["restarts"][0]["from"] == "memory");
  CHECK(result["restarts"][0]["nodes"] == 2);
  CHECK(result["restarts"][0]["steps_lost"] == 0);
  CHECK(result["steps"] == kSteps);
  CHECK(result.value("start_step", int64_t{0}) == 0);
  CHECK(result["final_loss"].is_number());
  CHECK(result["train_metrics"].contains("accuracy"));
  CHECK(result["eval_samples"] == 9996);  // 1666 whole batches of 6
  CHECK(result["metrics"]["accuracy"].get<double>() > 0.5);  // 30 steps of the MLP: about 0.7
  CHECK(result["nodes_from_step"] ==
        nlohmann::json::parse(R"([{"from_step": 0, "nodes": 3}])"));
  CHECK(lines.has("training done at step 30: the eval runs on the 2 node(s) that remain"));
  CHECK(lines.has("done: 30 steps, trained before a node was lost; the model from node 0's memory"));
  CHECK(cluster.shut_down() == 0);
}

// A newcomer starts from node 0's memory, which goes over the data plane in
// chunks, not in its part: a model and optimizer state past
// --max-message-bytes (the MLP's 5.4 MB against 4 MiB here) still reach it,
// as two messages of at most 4 MiB each, and it joins (the control message
// it used to go in would not take them).
TEST_CASE("a node back takes node 0's memory over the data plane, past what a control message holds") {
  const auto dir = fresh_dir("left-out");
  Cluster cluster(dir, "l", 3, 19908, "--max-message-bytes 4194304");
  REQUIRE(cluster.client);
  constexpr int64_t kSteps = 400;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 2;
  const auto run = submit_killing(cluster, read_text(root() + "/samples/mlp/mlp.json"), "mlp.json", options,
                                  Kill{2, 20, nullptr, 40});
  auto& live = run->ran;
  REQUIRE(live.ok());
  INFO(run->lines.all());
  INFO(live->result_json);
  REQUIRE(run->back);
  REQUIRE(live->status.ok());
  auto result = nlohmann::json::parse(live->result_json);
  CHECK(result["steps"] == kSteps);
  REQUIRE(result["restarts"].size() == 2);
  CHECK(result["restarts"][1]["error"] == "node 2 (127.0.0.3:19908) joined again");
  CHECK(result["restarts"][1]["nodes"] == 3);
  CHECK(result["restarts"][1]["steps_lost"] == 0);
  const int64_t grown = result["restarts"][1]["resumed_from_step"].get<int64_t>();
  CHECK(result["nodes_from_step"].back() == nlohmann::json::parse(fmt::format(R"({{"from_step": {}, "nodes": 3}})", grown)));
  // 669,706 weights and as many momenta: past the 4 MiB a message may hold.
  const std::string log = cluster[2].output(), said = fmt::format("took node 0's memory at step {} (", grown);
  INFO(log);
  const size_t at = log.find(said);
  REQUIRE(at != std::string::npos);
  CHECK(std::stoll(log.substr(at + said.size())) > 4194304);
  CHECK(log.find("bytes, 2 message(s)) over the data plane", at) != std::string::npos);
  CHECK(cluster.shut_down() == 0);
}
