// Faults on real links: a node's link cut (its bridge port down) while a job
// runs, for longer or shorter than the cluster's --dead-after. A cut link
// closes nothing: no FIN, no RST, the peer goes silent. What must hold: the
// job stops naming the nodes on both sides, nothing hangs, the cut-off agent
// stays and joins again when the link is back, and a job with restarts
// resumes from its checkpoint; a drop shorter than the deadline changes
// nothing but time.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/e2e/process_util.h"
#include "tests/e2e/run_results.h"
#include "tests/net/net_bed.h"
#include "tests/net/net_cluster.h"

namespace {

using Clock = std::chrono::steady_clock;
using rill::testing::NetBed;
using rill::testing::NetCluster;
using rill::testing::Ran;
using rill::testing::read_json;
using rill::testing::root;
using rill::testing::run_rill;

std::filesystem::path temp_dir() { return rill::testing::temp_dir("rill-net-fault-"); }

// Polls `done` every 20 ms for at most `seconds`.
template <typename Done>
bool wait_for(Done done, double seconds) {
  return rill::testing::Terminal::poll_until(done, seconds);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const std::string kJob = root() + "/samples/mlp/mlp.json";

// Submits a long MLP job to `cluster`, cuts node 1's link once step 20 is
// done, and waits for the submit to end.
struct Cut {
  Ran ran;                  // the submit's
  bool training = false;    // step 20 was done before the cut
  double cut_to_end = 0;    // seconds from the cut to the submit's end
};
Cut train_then_cut(NetBed& bed, NetCluster& cluster) {
  Cut cut;
  std::thread submit([&] {
    cut.ran = cluster.rill("submit " + kJob + " --steps 2000 --set train.log_every=10", 120);
  });
  cut.training = wait_for([&] { return cluster.agent(0).output().find("step     20/") != std::string::npos; }, 60);
  bed.set_link(1, false);
  const auto at = Clock::now();
  submit.join();
  cut.cut_to_end = seconds_since(at);
  return cut;
}

// After such a cut: the cut-off agent says it joins again and has not
// exited `stay_s` seconds later; with the link back it joins again, and
// the next job runs on both nodes.
void check_joins_again(NetBed& bed, NetCluster& cluster, double stay_s) {
  CHECK(wait_for([&] { return cluster.agent(1).output().find("joining again") != std::string::npos; }, 15));
  std::this_thread::sleep_for(std::chrono::duration<double>(stay_s));
  CHECK(cluster.agent(1).wait(0.1) == -1);
  bed.set_link(1, true);
  CHECK(wait_for([&] { return cluster.agent(0).output().find("node 1 (10.213.0.2:19900) joined again") !=
                              std::string::npos; }, 30));
  Ran next = cluster.rill("submit " + kJob + " --steps 10", 120);
  CHECK_MESSAGE(next.code == 0, next.output);
  CHECK(cluster.agent(0).output().find("10 steps of global batch 256 on 2 node(s)") != std::string::npos);
  for (int code : cluster.shutdown()) CHECK(code == 0);
}

}  // namespace

TEST_CASE("a cut link stops the job naming both sides; the cut-off agent stays and joins again when it is back") {
  auto dir = temp_dir() / "cut";
  NetBed bed(2);
  NetCluster cluster(bed, dir, "--devices cpu:1 --join-timeout 60 --heartbeat 0.5 --dead-after 3");
  cluster.wait_formed();
  const Cut cut = train_then_cut(bed, cluster);
  INFO(cut.ran.output, cluster.logs());
  REQUIRE(cut.training);
  CHECK(cut.ran.code != 0);
  // Both sides: the node that went silent and the master it did not reach.
  CHECK(cut.ran.output.find("node 1 (10.213.0.2:19900) lost: no heartbeat for 3 s reached the master node 0 "
                            "(10.213.0.1:19900)") != std::string::npos);
  // Seen by the heartbeats' deadline (3 s), not the stall timeout's 60 s;
  // 10 s leaves room for a loaded machine.
  CHECK(cut.cut_to_end < 10.0);
  // The cut-off agent did not exit: it waits for its master.
  check_joins_again(bed, cluster, 0);
}

// The data plane gives up on a silent connection after --link-timeout (2 s
// here), before the master's --dead-after (5 s): the cut-off node's data
// connection to the master closes, which is not its master's process gone
// (that closes while heartbeats still come), so it stays and joins again
// once the link is back, as when --dead-after comes first.
TEST_CASE("a link cut for longer than the data plane's link timeout: the cut-off agent stays and joins again") {
  auto dir = temp_dir() / "cut_long";
  NetBed bed(2);
  NetCluster cluster(bed, dir, "--devices cpu:1 --join-timeout 60 --heartbeat 0.5 --dead-after 5 --link-timeout 2");
  cluster.wait_formed();
  const Cut cut = train_then_cut(bed, cluster);
  INFO(cut.ran.output, cluster.logs());
  REQUIRE(cut.training);
  CHECK(cut.ran.code != 0);
  // The master's data connection timed out first: silent, not closed.
  CHECK(cut.ran.output.find("node 1 (10.213.0.2:19900) lost: no heartbeat for ") != std::string::npos);
  CHECK(cut.ran.output.find("its connection closed") == std::string::npos);
  // Past both timeouts the cut-off agent still waits for its master.
  check_joins_again(bed, cluster, 6);
  CHECK(cluster.agent(1).output().find("its connection closed") == std::string::npos);
}

// A checkpoint every 20 steps; the link is cut once step 30 is done and
// given back 2 s after the master declared the node lost. The attempt that
// resumes from step 20 runs the same steps on the same data: the loss curve
// and final loss are the uninterrupted run's, bit for bit.
TEST_CASE("with --max-restarts a job cut off by a link resumes from its checkpoint once the link is back") {
  auto dir = temp_dir() / "restart";
  std::filesystem::remove_all(dir);
  NetBed bed(2);
  NetCluster cluster(bed, dir, "--devices cpu:1 --join-timeout 60 --heartbeat 0.5 --dead-after 3");
  cluster.wait_formed();
  auto flags = [&](const std::string& name) {
    return " --steps 80 --set train.log_every=10 --set checkpoint.every=20 --set checkpoint.keep=10 --set checkpoint.dir=" +
           (dir / name).string() + " --result " + (dir / (name + ".json")).string();
  };
  Ran straight = cluster.rill("submit " + kJob + flags("straight"), 120);
  REQUIRE_MESSAGE(straight.code == 0, straight.output);

  Ran ran;
  std::thread submit([&] { ran = cluster.rill("submit " + kJob + flags("restarted") + " --max-restarts 1", 180); });
  const size_t from = cluster.agent(0).output().size();
  const bool reached =
      wait_for([&] { return cluster.agent(0).output().find("step     30/", from) != std::string::npos; }, 60);
  bed.set_link(1, false);
  const bool declared = wait_for(
      [&] { return cluster.agent(0).output().find("lost: no heartbeat for 3 s", from) != std::string::npos; }, 20);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  bed.set_link(1, true);
  submit.join();
  INFO(ran.output, cluster.logs());
  REQUIRE(reached);
  REQUIRE(declared);
  REQUIRE(ran.code == 0);
  auto result = read_json(dir / "restarted.json");
  auto want = read_json(dir / "straight.json");
  REQUIRE(result["restarts"].size() == 1);
  CHECK(result["restarts"][0]["resumed_from_step"].get<int64_t>() >= 20);
  CHECK(result["final_loss"] == want["final_loss"]);
  for (int code : cluster.shutdown()) CHECK(code == 0);
}

// A drop shorter than --dead-after (10 s by default) and ZeroMQ's link
// timeout (20 s): TCP retransmits what was lost, the job goes on, and
// computes exactly what it would have.
TEST_CASE("a link that drops for a second and comes back changes nothing but time") {
  auto dir = temp_dir() / "drop";
  std::filesystem::remove_all(dir);
  NetBed bed(2);
  NetCluster cluster(bed, dir, "--devices cpu:1 --join-timeout 60");
  cluster.wait_formed();
  const std::string flags = " --steps 60 --set train.log_every=10 --result ";
  Ran straight = cluster.rill("submit " + kJob + flags + (dir / "straight.json").string(), 120);
  REQUIRE_MESSAGE(straight.code == 0, straight.output);
  Ran ran;
  const size_t from = cluster.agent(0).output().size();
  std::thread submit([&] { ran = cluster.rill("submit " + kJob + flags + (dir / "dropped.json").string(), 120); });
  const bool reached =
      wait_for([&] { return cluster.agent(0).output().find("step     20/", from) != std::string::npos; }, 60);
  bed.set_link(1, false);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  bed.set_link(1, true);
  submit.join();
  INFO(ran.output, cluster.logs());
  REQUIRE(reached);
  REQUIRE(ran.code == 0);
  auto got = read_json(dir / "dropped.json");
  auto want = read_json(dir / "straight.json");
  CHECK(got["loss_curve"] == want["loss_curve"]);
  CHECK(got["final_loss"] == want["final_loss"]);
  for (int code : cluster.shutdown()) CHECK(code == 0);
}
