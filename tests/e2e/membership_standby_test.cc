// A standby agent taking a lost node's place at another address (a
// machine kept spare, a pod started again with a new IP): `rill agent
// --rank R --address A`, with the same machine list. The master moves rank
// R's data port to A on every node (Rejoined, JoinReply), each data port
// admits A, and the job goes on as it would with the node back at its own
// address.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/default_key.h"
#include "membership_util.h"
#include "process_util.h"

namespace {

using rill::testing::read_text;
using rill::testing::root;
using rill::testing::run_rill;
using namespace rill::testing::membership;

}  // namespace

// The layout a standby is for: pipeline stages placed on named nodes
// cannot run on fewer, so the job waits for node 1, whose machine is gone
// for good. A standby at 127.0.0.9 takes rank 1, and the job restarts from
// the replicas node 0 gathered into its memory, bit for bit as with node
// 1's own agent back (membership_util.h).
TEST_CASE("a pipeline placed on named nodes that loses one goes on from memory with a standby agent at another "
          "address in its place") {
  pipeline_back_from_memory("standby-pipeline", 19916, 19920, "127.0.0.9");
}

// ZeRO on 3 nodes: node 2 is lost, the others go on from the replicas, and
// a standby at another address takes rank 2 back at a replica step: node
// 0's memory reaches it over the data plane, and every all-reduce after
// runs through it. Node 1 learns of the move from Rejoined; a later agent
// would from its JoinReply.
TEST_CASE("ZeRO on 3 nodes takes a standby agent at another address in a lost node's place, from node 0's memory") {
  const auto dir = fresh_dir("standby-zero");
  Cluster cluster(dir, "z", 3, 19928);
  REQUIRE(cluster.client);
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 100;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.overrides.push_back("train.zero=true");
  options.min_nodes = 2;
  const auto killed = submit_killing(cluster, job, "mlp.json", options,
                                     Kill{.victim = 2, .step = 25, .back_at = 32, .back_address = "127.0.0.9:19928"});
  auto& run = killed->ran;
  Lines& lines = killed->lines;
  REQUIRE(run.ok());
  INFO(lines.all());
  INFO(run->result_json);
  INFO(read_text(cluster.log_of(2, "-again")));
  REQUIRE(killed->killed);
  REQUIRE(killed->back);
  REQUIRE(run->status.ok());
  auto result = nlohmann::json::parse(run->result_json);
  REQUIRE(result["restarts"].size() == 2);
  CHECK(result["restarts"][0]["from"] == "memory");
  CHECK(result["restarts"][0]["nodes"] == 2);
  const auto& joined = result["restarts"][1];
  CHECK(joined["error"] == "node 2 (127.0.0.3:19928) joined again");
  CHECK(joined["from"] == "memory");
  CHECK(joined["nodes"] == 3);
  CHECK(result["steps"] == kSteps);
  CHECK(result["nodes_from_step"].back()["nodes"] == 3);
  CHECK(cluster.log(1).find("node 2 (127.0.0.3:19928) listens at 127.0.0.9:19928 now") != std::string::npos);
  CHECK(cluster.shut_down() == 0);
}

// A job of 5 steps on every node of `cluster`: whether each node reaches
// every other's data port where it is now.
bool trains(Cluster& cluster, const std::filesystem::path& dir) {
  auto ran = cluster.client->submit_text(read_text(root() + "/samples/mlp/mlp.json"), "mlp.json",
                                         options_for(dir, 5));
  INFO((ran.ok() ? ran->status.to_string() + " " + ran->result_json : ran.status().to_string()));
  return ran.ok() && ran->status.ok() && nlohmann::json::parse(ran->result_json)["steps"] == 5;
}

// A standby where no other node could reach it (a wildcard, a name each
// node would resolve on its own) is refused, naming it, and the cluster
// goes on. A standby at an address of its own is taken: node 2,
// started again later, learns where it is from its JoinReply, and node 1's
// own agent back at its listed address is moved back on every node
// (Rejoined). Each time a job trains on all three. Node 0 never moves.
TEST_CASE("standbys: a wildcard or a name refused, an address taken, learned by a later agent, and moved back") {
  const auto dir = fresh_dir("standby-moves");
  Cluster cluster(dir, "w", 3, 19924);
  REQUIRE(cluster.client);
  // Once formed: a node's own error while it forms ends the forming.
  REQUIRE(until([&] { return cluster.log(0).find("cluster of 3 node(s) formed") != std::string::npos; }, 30));
  ::kill(cluster[1].pid, SIGKILL);
  cluster[1].wait(10);
  // Not on loopback, it needs the key named (the default key is made for
  // loopback agents only).
  const auto key = rill::comm::default_key_path();
  REQUIRE(key.ok());
  // Refused before it listens (the master checks the same: tests/runtime/
  // standby_join_test.cc).
  const std::pair<std::string, std::string> refusals[] = {
      {"0.0.0.0:19930 --key " + key.value(), "--address: 0.0.0.0 is no one machine's address"},
      {"localhost:19930", "--address: 'localhost' is not an IPv4 or IPv6 address"}};
  for (const auto& [flags, refused] : refusals) {
    CAPTURE(flags);
    cluster.restart(1, flags);
    CHECK(cluster[1].wait(30) != 0);
    const std::string log = read_text(cluster.log_of(1, "-again"));
    INFO(log);
    CHECK(log.find(refused) != std::string::npos);
  }
  cluster.restart(1, "127.0.0.7");
  REQUIRE(until([&] { return cluster.log(0).find("listens at 127.0.0.7:19924 now") != std::string::npos; }, 30));
  CHECK(until([&] { return cluster[2].output().find("listens at 127.0.0.7:19924 now") != std::string::npos; }, 10));
  CHECK(trains(cluster, dir / "standby"));
  const auto status = run_rill("status --master 127.0.0.1:19924", 30);
  INFO(status.output);
  CHECK(status.output.find("listening at 127.0.0.7:19924") != std::string::npos);

  ::kill(cluster[2].pid, SIGKILL);
  cluster[2].wait(10);
  cluster.restart(2);
  REQUIRE(until([&] { return read_text(cluster.log_of(2, "-again")).find("joined a cluster") != std::string::npos; },
                30));
  CHECK(read_text(cluster.log_of(2, "-again")).find("node 1 (127.0.0.2:19924) listens at 127.0.0.7:19924 now") !=
        std::string::npos);
  CHECK(trains(cluster, dir / "later"));

  ::kill(cluster[1].pid, SIGKILL);
  cluster[1].wait(10);
  cluster.restart(1);
  REQUIRE(until([&] { return cluster.log(0).find("listens at 127.0.0.2:19924 now") != std::string::npos; }, 30));
  CHECK(trains(cluster, dir / "home"));
  CHECK(run_rill("status --master 127.0.0.1:19924", 30).output.find("listening at") == std::string::npos);

  const auto master = run_rill("agent --machines 127.0.0.1:19924,127.0.0.2:19924,127.0.0.3:19924 --rank 0 "
                               "--address 127.0.0.8",
                               30);
  CHECK(master.code != 0);
  CHECK(master.output.find("node 0 (the master) listens at its entry of the machine list") != std::string::npos);
  CHECK(cluster.shut_down() == 0);
}
