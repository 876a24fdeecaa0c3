// Live membership on the control plane in one process, where the test holds
// the master between an attempt's compile and its phase: what no timing of
// real agents can pin down (tests/e2e/membership_*_test.cc run them).
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/runtime/inproc_cluster.h"

namespace rill {
namespace {

using namespace testing::inproc;

// A gate the master's job thread waits at (AgentOptions::before_phase) the
// first time a phase begins, until the test opens it (or 60 s of real time).
class PhaseGate {
 public:
  void arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    if (used_) return;
    used_ = true;
    arrived_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, 60s, [&] { return open_; });
  }
  bool wait_arrived() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 60s, [&] { return arrived_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool used_ = false, arrived_ = false, open_ = false;
};

}  // namespace

// A live job starts on the 2 nodes up (node 2 silent, declared lost); node
// 2 speaks again and joins while the first attempt has compiled and its
// phase has not begun. The phase finds it up and outside, ends at its first
// step boundary, and the job goes on with 3 nodes from there: before, it
// stayed out until another change of nodes (here: for the whole job).
TEST_CASE("control plane in one process: a node back while an attempt compiles is taken at its first step boundary") {
  Cluster cluster(3);
  PhaseGate gate;
  cluster.options(0).before_phase = [&](int64_t, int) { gate.arrive(); };
  for (int r = 0; r < 3; ++r) cluster.options(r).join_timeout_s = 100;
  cluster.start_all();
  TestClient client(cluster.hub(), "client-1");
  wait_formed(client, 3);
  // Node 2's clock stands still: no heartbeat of its reaches the master,
  // which declares it lost after dead_after (10 s).
  for (int s = 0; s < 11; ++s) {
    cluster.clock(0).advance(1);
    cluster.clock(1).advance(1);
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(node_state(client, 2) == "lost");
  ctl::Submit submit;
  submit.job_text = read_text(testing::source_path("samples/linear_regression/linear_regression.json"));
  submit.file_name = "linear_regression.json";
  submit.overrides = {"train.steps=40"};
  submit.min_nodes = 2;
  submit.follow = true;
  client.send(submit);
  REQUIRE(gate.wait_arrived());
  // The first attempt is compiled for nodes 0 and 1; node 2 speaks and
  // joins again while the master's job thread waits at the gate.
  cluster.clock(2).advance(1);
  wait_formed(client, 3);
  gate.open();
  const std::optional<ctl::Result> result = await_result(cluster, client, 5ms);
  REQUIRE_MESSAGE(result.has_value(), "no result");
  REQUIRE_MESSAGE(result->error.empty(), result->error);
  const nlohmann::json j = nlohmann::json::parse(result->result_json);
  INFO(j.dump());
  CHECK(j["steps"] == 40);
  REQUIRE(j["restarts"].size() == 1);
  CHECK(j["restarts"][0]["error"] == "node 2 (127.0.0.1:19920) joined again");
  CHECK(j["restarts"][0]["nodes"] == 3);
  // The stop is asked for as node 0 starts its run, before it begins a
  // step (RunEnd::hold); node 1 got its Start a moment before and, until its
  // Hold arrives, may begin steps: its variable none past step 0 (step 1's
  // value needs node 0's gradients), its data source up to step 2 (its two
  // slots, one freed as step 0's forward reads it). The end is one past the
  // last step begun: step 3 at the latest, of the plan's 40 (seen under a
  // loaded ./dev test; usually 0 or 1).
  REQUIRE(j["nodes_from_step"].size() == 2);
  CHECK(j["nodes_from_step"][0] == nlohmann::json::parse(R"({"from_step": 0, "nodes": 2})"));
  CHECK(j["nodes_from_step"][1]["nodes"] == 3);
  CHECK(j["nodes_from_step"][1]["from_step"].get<int64_t>() <= 3);
  shut_down(cluster, client, 3);
}

}  // namespace rill
