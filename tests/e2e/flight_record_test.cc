// The flight record of communication on real agents (comm/flight_record.h):
// `rill status --comm` shows a running job's collectives on every node, and
// a node that hangs inside a data-parallel all-reduce (SIGSTOP: alive, its
// connections open, silent) is named as the node every other one waits for,
// with the collective and its sequence number.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include "process_util.h"
#include "runtime/cluster/client.h"

namespace {

using Clock = std::chrono::steady_clock;
using rill::testing::Agent;
using rill::testing::Ran;
using rill::testing::read_text;
using rill::testing::root;
using rill::testing::run_rill;

std::filesystem::path temp_dir() { return rill::testing::temp_dir("rill-flight-"); }

}  // namespace

TEST_CASE("a node stopped inside an all-reduce is named as the one every other node waits for") {
  const std::string machines = "127.0.0.1:19460,127.0.0.2:19460,127.0.0.3:19460";
  // Silent for 2 s: lost (its process is stopped, so its connections stay open).
  const std::string flags = " --devices cpu:1 --heartbeat 0.2 --dead-after 2 --join-timeout 20";
  Agent master("--machines " + machines + " --rank 0" + flags, (temp_dir() / "f0.log").string());
  Agent second("--machines " + machines + " --rank 1" + flags, (temp_dir() / "f1.log").string());
  Agent stopped("--machines " + machines + " --rank 2" + flags, (temp_dir() / "f2.log").string());
  auto client = rill::Client::connect("127.0.0.1:19460", 30);
  REQUIRE(client.ok());
  std::string comm;  // `rill status --comm` while the job runs
  std::atomic<bool> stopped_it{false};
  std::thread stopper([&] {
    // Training runs: a progress line with its loss.
    for (int i = 0; i < 600 && master.output().find(" loss ") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // A heartbeat or two with the records in it.
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    comm = run_rill("status --master 127.0.0.1:19460 --comm --job 1").output;
    kill(stopped.pid, SIGSTOP);
    stopped_it = true;
  });
  rill::SubmitOptions options;
  options.steps = 100000;  // runs until stopped
  options.overrides = {"train.log_every=10"};
  auto result = (*client)->submit_text(read_text(root() + "/samples/mlp/mlp.json"), "mlp.json", options);
  stopper.join();
  kill(stopped.pid, SIGCONT);  // for its end (the agent is killed below)
  REQUIRE(stopped_it.load());
  INFO(comm);
  // Every node's record: its gradient all-reduces among the three nodes.
  CHECK(comm.find("rank 0:") != std::string::npos);
  CHECK(comm.find("rank 2:") != std::string::npos);
  CHECK(comm.find("among [0, 1, 2]") != std::string::npos);
  CHECK(comm.find("last completed all_reduce #") != std::string::npos);
  REQUIRE_MESSAGE(result.ok(), result.status().to_string());
  REQUIRE_FALSE(result->status.ok());
  const std::string error = result->status.message();
  INFO(error);
  CHECK(error.rfind("node 2 (127.0.0.3:19460) lost", 0) == 0);
  // Nodes 0 and 1 wait for node 2, directly or through each other (a ring
  // passes the wait on), in an all-reduce of a gradient bucket, by number.
  CHECK(error.find("every other node waited for node 2 (127.0.0.3:19460), which left no record") != std::string::npos);
  CHECK(std::regex_search(error, std::regex("node 0 \\(127\\.0\\.0\\.1:19460\\) in [^ ]+ all_reduce #[0-9]+")));
  CHECK(std::regex_search(error, std::regex("node 1 \\(127\\.0\\.0\\.2:19460\\) in [^ ]+ all_reduce #[0-9]+")));
  // The last call of that collective each node completed, every survivor's.
  CHECK(std::regex_search(error, std::regex("completed: #[0-9]+ on node 0 \\([^)]*\\), #[0-9]+ on node 1")));
  (void)(*client)->shutdown();
  CHECK(master.wait(15) == 0);
}
