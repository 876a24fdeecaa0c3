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

// Where no other node could reach it: a wildcard is where an agent
// listens, not an address to send to. The master refuses the join, naming
// the address, and the cluster goes on; node 0 never moves.
TEST_CASE("a standby at a wildcard address is refused by the master, and node 0 cannot move") {
  const auto dir = fresh_dir("standby-refused");
  Cluster cluster(dir, "w", 2, 19924);
  REQUIRE(cluster.client);
  // Once formed: a node's own error while it forms ends the forming.
  REQUIRE(until([&] { return cluster.log(0).find("cluster of 2 node(s) formed") != std::string::npos; }, 30));
  ::kill(cluster[1].pid, SIGKILL);
  cluster[1].wait(10);
  // Not on loopback, it needs the key named (the default key is made for
  // loopback agents only).
  const auto key = rill::comm::default_key_path();
  REQUIRE(key.ok());
  cluster.restart(1, "0.0.0.0:19926", "--key " + key.value());
  CHECK(cluster[1].wait(30) != 0);
  const std::string refused = read_text(cluster.log_of(1, "-again"));
  INFO(refused);
  CHECK(refused.find("node 1 (127.0.0.2:19924) cannot be reached at 0.0.0.0:19926") != std::string::npos);
  CHECK(refused.find("wildcard") != std::string::npos);
  // A standby at an address of its own is taken.
  cluster.restart(1, "127.0.0.7");
  CHECK(until([&] { return read_text(cluster.log_of(1, "-again")).find("joined a cluster of 2") != std::string::npos; },
              30));
  CHECK(until([&] { return cluster.log(0).find("listens at 127.0.0.7:19924 now") != std::string::npos; }, 10));
  const auto status = run_rill("status --master 127.0.0.1:19924", 30);
  INFO(status.output);
  CHECK(status.output.find("listening at 127.0.0.7:19924") != std::string::npos);
  const auto master = run_rill(fmt::format("agent --machines 127.0.0.1:19924,127.0.0.2:19924 --rank 0 "
                                           "--address 127.0.0.8"),
                               30);
  CHECK(master.code != 0);
  CHECK(master.output.find("node 0 (the master) listens at its entry of the machine list") != std::string::npos);
  CHECK(cluster.shut_down() == 0);
}
