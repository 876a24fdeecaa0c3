// The control plane in one process: agents over in-process control channels
// (runtime/cluster/inproc_control_channel.h) and data transports, each on a
// clock of its own that only the test moves. Joins, liveness, a job's
// phases, full queues and faults on the control links are checked without
// processes, ports or sleeps standing in for time; tests/e2e keeps the end
// to end runs of real agents.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "comm/transport.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/inproc_control_channel.h"
#include "tests/runtime/inproc_cluster.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

namespace ctl = control;
using namespace std::chrono_literals;

using namespace testing::inproc;

}  // namespace

TEST_CASE("control plane in one process: 3 agents form a cluster, run a job over it, and shut down") {
  Cluster cluster(3);
  cluster.start_all();
  TestClient client(cluster.hub(), "client-1");
  wait_formed(client, 3);
  const nlohmann::json result = run_linear_regression(client);
  auto w = result["variables"]["w"]["values"];
  REQUIRE(w.size() == 2);
  CHECK(std::abs(w[0].get<double>() - 2.0) < 1e-3);
  CHECK(std::abs(w[1].get<double>() - 3.0) < 1e-3);
  // The master measured the job's start: every node's compile, checks, start.
  REQUIRE(result.contains("seconds_to_first_step"));
  CHECK(result["seconds_to_first_step"].get<double>() > 0);
  // A second job on the same cluster, after the first.
  CHECK(run_linear_regression(client, {"train.steps=10"})["steps"] == 10);
  shut_down(cluster, client, 3);
  for (int r = 0; r < 3; ++r) CHECK_MESSAGE(cluster.result(r).ok(), cluster.result(r).to_string());
}

TEST_CASE("control plane in one process: a node of another version, or other devices, is refused on both sides") {
  struct Case {
    std::function<void(AgentOptions&)> differ;
    std::string error;
  };
  const Case cases[] = {
      {[](AgentOptions& o) { o.version = "0.0.1-other"; },
       "node 1 (127.0.0.1:19910) runs Rill 0.0.1-other"},
      {[](AgentOptions& o) { o.devices = "cpu:2"; },
       "node 1 (127.0.0.1:19910) has devices cpu:2 but the master has cpu:1"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.error);
    Cluster cluster(2);
    c.differ(cluster.options(1));
    cluster.start_all();
    REQUIRE(cluster.wait_for_ended(2));
    cluster.join();
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(cluster.result(r).code() == Code::kAborted);
      CHECK(cluster.result(r).message().find(c.error) != std::string::npos);
    }
  }
}

// What the node itself says is wrong ends the forming (above); a Join that
// cannot be from the node it names does not: a client, a stranger or a stray
// message is refused and the cluster forms.
TEST_CASE("control plane in one process: a Join that cannot be the node it names is refused, and the cluster forms") {
  Cluster cluster(2);
  cluster.start(0);
  TestClient stranger(cluster.hub(), "stranger");
  // A rank outside the list, and node 1's from a peer that is not node 1.
  for (int rank : {7, 1}) {
    CAPTURE(rank);
    ctl::Join join;
    join.rank = rank;
    join.version = ctl::kRillVersion;
    join.schema_hash = ctl::schema_hash();
    join.devices = "cpu:1";
    stranger.send(join);
    auto answer = stranger.next(10000ms);
    REQUIRE(answer.has_value());
    auto* reply = std::get_if<ctl::JoinReply>(&*answer);
    REQUIRE(reply != nullptr);
    CHECK_FALSE(reply->ok);
  }
  cluster.start(1);
  TestClient client(cluster.hub(), "client-1");
  wait_formed(client, 2);
  shut_down(cluster, client, 2);
  for (int r = 0; r < 2; ++r) CHECK_MESSAGE(cluster.result(r).ok(), cluster.result(r).to_string());
}

// A client (which holds a client key, not a node's) cannot speak for a node:
// the end of a run with an error, a link's failure and a hold's answer
// claiming node 1 are dropped, and the job runs to its end.
TEST_CASE("control plane in one process: a client's messages in a node's name are dropped, and the job goes on") {
  Cluster cluster(2);
  cluster.start(0);
  cluster.start(1);
  TestClient client(cluster.hub(), "client-1");
  wait_formed(client, 2);
  ctl::Submit submit;
  submit.job_text = read_text(testing::source_path("samples/linear_regression/linear_regression.json"));
  submit.file_name = "linear_regression.json";
  submit.follow = true;
  submit.overrides = {"train.steps=20000", "train.log_every=100"};
  client.send(submit);
  TestClient forger(cluster.hub(), "forger");
  bool forged = false;
  std::optional<ctl::Result> result;
  for (int n = 0; n < 100000 && !result; ++n) {
    auto m = client.next();
    REQUIRE_MESSAGE(m.has_value(), "no answer from the master");
    if (auto* r = std::get_if<ctl::SubmitReply>(&*m)) REQUIRE_MESSAGE(r->error.empty(), r->error);
    if (auto* r = std::get_if<ctl::Result>(&*m)) result = *r;
    if (std::holds_alternative<ctl::Progress>(*m) && !forged) {  // the job runs: phase 0 of job 1
      ctl::Done done;
      done.job_id = 1;
      done.node = 1;
      done.error = "forged";
      done.code = Code::kInternal;
      forger.send(done);
      forger.send(ctl::LinkError{1, "forged: the data link from node 1 failed"});
      forger.send(ctl::Held{1, 0, 1, 0});
      forged = true;
    }
  }
  REQUIRE(forged);
  REQUIRE(result.has_value());
  CHECK_MESSAGE(result->error.empty(), result->error);
  CHECK(nlohmann::json::parse(result->result_json)["steps"] == 20000);
  shut_down(cluster, client, 2);
}

TEST_CASE("control plane in one process: a node that never joins is named when the master's join deadline passes") {
  Cluster cluster(3);
  cluster.start(0);
  cluster.start(1);  // node 2 never starts
  // Nothing happens while no time passes on the master's clock...
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(cluster.wait_for_ended(1, 0s));
  // ...and the deadline is the master's clock's.
  cluster.clock(0).advance(31);
  REQUIRE(cluster.wait_for_ended(2));
  cluster.join();
  CHECK(cluster.result(0).message().find("node 2 (127.0.0.1:19920) did not join within 30 s") != std::string::npos);
  // Node 1 joined and is told why the cluster did not form.
  CHECK(cluster.result(1).message().find("the cluster did not form: node 2") != std::string::npos);
}

TEST_CASE("control plane in one process: a silent node is lost after dead_after, and joins again when it speaks") {
  Cluster cluster(2);
  cluster.start_all();
  TestClient client(cluster.hub(), "client-1");
  wait_formed(client, 2);
  // The master's time passes, node 1's does not: node 1 sends no heartbeat.
  for (int s = 0; s < 11; ++s) {
    cluster.clock(0).advance(1);
    std::this_thread::sleep_for(20ms);
  }
  CHECK(node_state(client, 1) == "lost");
  // Node 1's next heartbeat: the master tells it that it was declared lost,
  // and it joins again on a new control link, as a restarted agent would...
  cluster.clock(1).advance(1);
  wait_formed(client, 2);
  CHECK_FALSE(cluster.wait_for_ended(1, 0s));
  // ...and takes part in the next job.
  const nlohmann::json result = run_linear_regression(client, {"train.steps=5"});
  CHECK(result["steps"] == 5);
  shut_down(cluster, client, 2);
  for (int r = 0; r < 2; ++r) CHECK_MESSAGE(cluster.result(r).ok(), cluster.result(r).to_string());
}

TEST_CASE("control plane in one process: queues that hold one message delay the control plane, never lose from it") {
  // Every control inbox holds at most one message: a sender meets a full
  // queue at almost every send and keeps the message for a later turn.
  Cluster cluster(2, 1);
  cluster.start_all();
  TestClient client(cluster.hub(), "client-1");
  const auto dir = std::filesystem::temp_directory_path() / ("rill-control-plane-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const nlohmann::json result = run_linear_regression(
      client, {"train.steps=20", "checkpoint.dir=" + dir.string(), "checkpoint.every=1", "checkpoint.keep=40"});
  CHECK(result["checkpoints_written"] == 20);
  shut_down(cluster, client, 2);
  std::filesystem::remove_all(dir);
}

// A node that stalls mid-job (its clock stops) is declared lost; when it
// speaks again it is told so, stops its part and joins again in its rank,
// and the job runs again from its newest checkpoint to the same w, bit for
// bit, as without (tests/e2e/failure_test.cc restarts a killed agent).
TEST_CASE("control plane in one process: a node lost mid-job joins again and the job resumes to the same result") {
  Cluster cluster(2);
  // Each checkpoint write takes 50 ms longer: training waits for the disk,
  // so the job is still running when node 1 goes silent.
  cluster.options(0).checkpoint_write_delay_s = 0.05;
  // Time passes 1 s per 5 ms below: deadlines of 100 s leave 0.5 s of real
  // time to answer, however loaded the machine.
  for (int r = 0; r < 2; ++r) {
    cluster.options(r).dead_after_s = 100;
    cluster.options(r).join_timeout_s = 100;
  }
  cluster.start_all();
  TestClient client(cluster.hub(), "client-1");
  wait_formed(client, 2);
  const auto root = std::filesystem::temp_directory_path() / ("rill-control-restart-" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  const std::vector<std::string> job = {"train.steps=300", "checkpoint.every=10", "checkpoint.keep=40"};
  auto with_dir = [&](const std::string& dir) {
    std::vector<std::string> overrides = job;
    overrides.push_back("checkpoint.dir=" + (root / dir).string());
    return overrides;
  };
  const nlohmann::json whole = run_linear_regression(client, with_dir("whole"));
  ctl::Submit submit;
  submit.job_text = read_text(testing::source_path("samples/linear_regression/linear_regression.json"));
  submit.overrides = with_dir("restarted");
  submit.max_restarts = 1;
  submit.follow = true;
  client.send(submit);
  // Time passes for both until the first checkpoint is on disk...
  for (int turn = 0; turn < 3000 && !std::filesystem::exists(root / "restarted" / "latest"); ++turn) {
    cluster.tick();
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(std::filesystem::exists(root / "restarted" / "latest"));
  // ...then only for the master: node 1 is silent, lost after 100 s, and
  // the master says it restarts the job once every node is up...
  bool restarting = false;
  for (int turn = 0; turn < 3000 && !restarting; ++turn) {
    cluster.clock(0).advance(1);
    auto m = client.next(5ms);
    auto* line = m ? std::get_if<ctl::Progress>(&*m) : nullptr;
    restarting = line && line->line.find("restart 1 of 1 once every node is up") != std::string::npos;
  }
  REQUIRE(restarting);
  // ...which node 1 is again once it speaks (its Done of the aborted run):
  // told it was declared lost, it joins again.
  const std::optional<ctl::Result> result = await_result(cluster, client, 10ms);
  CHECK_FALSE(cluster.wait_for_ended(1, 0s));
  REQUIRE_MESSAGE(result.has_value(), "no result after the restart");
  REQUIRE_MESSAGE(result->error.empty(), result->error);
  const nlohmann::json restarted = nlohmann::json::parse(result->result_json);
  INFO(restarted.dump());
  CHECK(restarted["restarts"].size() == 1);
  CHECK(restarted["variables"]["w"]["values"] == whole["variables"]["w"]["values"]);
  shut_down(cluster, client, 2);
  std::filesystem::remove_all(root);
}

// The linear regression job on 2 agents with `fault` injected into the
// control messages agent `faulty` sends (-1: none), time passing for every
// agent alike in steps of 1 s (a reordered message goes out behind the next
// heartbeat; deadlines pass without waiting them out): the result.
ctl::Result run_with_control_fault(int faulty, const std::string& fault) {
  Cluster cluster(2);
  // Time passes 1 s per 20 ms here: deadlines of 100 s and more leave every
  // agent 2 s of real time to answer, however loaded the machine. A silent
  // node is lost before a plan is late.
  for (int r = 0; r < 2; ++r) {
    cluster.options(r).dead_after_s = 100;
    cluster.options(r).join_timeout_s = 200;
  }
  if (faulty >= 0) {
    auto parsed = parse_control_fault(fault);
    REQUIRE(parsed.ok());
    cluster.options(faulty).fault = *parsed;
  }
  cluster.start_all();
  TestClient client(cluster.hub(), "client-1");
  ctl::Submit submit;
  submit.job_text = read_text(testing::source_path("samples/linear_regression/linear_regression.json"));
  submit.overrides = {"train.steps=30"};
  client.send(submit);
  const std::optional<ctl::Result> result = await_result(cluster, client, 20ms);
  REQUIRE_MESSAGE(result.has_value(), "no result: the job hangs");
  client.send(ctl::Shutdown{});
  // A node cut off from the master leaves by its own liveness check.
  for (int turn = 0; turn < 3000 && !cluster.wait_for_ended(2, 0s); ++turn) {
    cluster.tick();
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(cluster.wait_for_ended(2, 0s));
  return *result;
}

std::vector<double> w_of(const ctl::Result& result) {
  return nlohmann::json::parse(result.result_json)["variables"]["w"]["values"].get<std::vector<double>>();
}

// Every control-plane fault on either side of the link between the master
// and node 1 is tolerated (the same w as without it, bit for bit: the same
// computation ran) or ends the job with an error naming the node or link,
// by the deadlines of the agents' clocks: never a wrong result, never a
// hang.
TEST_CASE("control plane in one process: every fault on either side of a link is tolerated or named") {
  const ctl::Result clean = run_with_control_fault(-1, "");
  REQUIRE_MESSAGE(clean.error.empty(), clean.error);
  REQUIRE(w_of(clean).size() == 2);
  struct Case {
    int faulty;
    std::string fault;
    std::string error;  // "" = tolerated
  };
  const std::string node1 = "node 1 (127.0.0.1:19910)";
  const std::vector<Case> cases = {
      {1, "duplicate:PlanAck", ""},
      {1, "duplicate:Done", ""},
      {0, "duplicate:PlanPart", ""},
      {0, "duplicate:Start", ""},
      {1, "delay:PlanAck:0.2", ""},
      {0, "delay:Start:0.2", ""},
      {1, "delay:Done:0.2", ""},
      {1, "reorder:PlanAck", ""},
      {0, "reorder:PlanPart", ""},
      {1, "drop:Heartbeat", ""},
      {1, "drop:PlanAck", node1 + " did not report its part of the plan built within 200 s"},
      {1, "drop:Done", node1 + " did not report the end of the run"},
      {1, "corrupt:PlanAck", "the control link from " + node1 + " to the master: control message"},
      {1, "corrupt:Done", "the control link from " + node1 + " to the master: control message"},
      {0, "corrupt:PlanPart", "the control link from the master to " + node1},
      {0, "corrupt:Start", "the control link from the master to " + node1},
      {1, "cut:PlanAck", node1 + " lost: no heartbeat for 100 s"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.faulty);
    CAPTURE(c.fault);
    const ctl::Result run = run_with_control_fault(c.faulty, c.fault);
    INFO(run.error);
    if (c.error.empty()) {
      CHECK(run.error.empty());
      CHECK(w_of(run) == w_of(clean));
    } else {
      CHECK(run.error.find(c.error) != std::string::npos);
    }
  }
}

}  // namespace rill
