// Agents on a network: each in a namespace of its own, over veth links
// through a bridge, some rate-limited (tests/net/net_bed.h). What loopback
// cannot show: traffic that crosses an interface, links slower than the
// work, links that are cut.
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

using rill::testing::NetBed;
using rill::testing::NetCluster;
using rill::testing::Ran;
using rill::testing::read_json;
using rill::testing::root;
using rill::testing::run_rill;

std::filesystem::path temp_dir() { return rill::testing::temp_dir("rill-net-"); }

}  // namespace

TEST_CASE("the bed: nodes reach each other over the bridge, and nothing is left when it goes") {
  std::string prefix;
  {
    NetBed bed(3, {"", "50mbit", ""});
    prefix = bed.exec_prefix(0);
    // A connection to a port nobody listens on is refused by the peer's
    // kernel: the address answers (an unreachable one would time out).
    for (int n : {1, 2}) {
      Ran tcp = rill::testing::run_shell(bed.exec_prefix(0) + " bash -c 'exec 3<>/dev/tcp/" + NetBed::address(n) +
                                             "/9; echo connected' ", 20);
      CHECK_MESSAGE(tcp.output.find("Connection refused") != std::string::npos, tcp.output);
    }
    // A process in the bed is killed with it.
    Ran started = rill::testing::run_shell(bed.exec_prefix(1) + " sleep 600 > /dev/null 2>&1 &", 10);
    CHECK(started.code == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // The namespaces are gone: their descriptors were the bed's.
  Ran after = rill::testing::run_shell(prefix + " true", 10);
  CHECK(after.code != 0);
  Ran sleeping = rill::testing::run_shell("pgrep -x -f 'sleep 600'", 10);
  CHECK_MESSAGE(sleeping.code != 0, sleeping.output);
}

// The same plan on the same data computes the same sums in the same order
// whichever transport carries them, so the losses are the loopback run's bit
// for bit; only the time differs.
TEST_CASE("data parallelism on 2 agents over 200 Mbit/s links trains bit for bit as on loopback") {
  auto dir = temp_dir() / "dp";
  std::filesystem::create_directories(dir);
  const std::string job = root() + "/samples/mlp/mlp.json";
  Ran local = run_rill("run " + job + " --nodes 2 --devices cpu:1 --ctrl-port 19910 --steps 10 --result " +
                       (dir / "loopback.json").string());
  REQUIRE_MESSAGE(local.code == 0, local.output);

  NetBed bed(2, {"200mbit", "200mbit"});
  NetCluster cluster(bed, dir, "--devices cpu:1 --join-timeout 30");
  cluster.wait_formed();
  const long long sent_before = bed.sent_bytes(1);
  Ran ran = cluster.rill("submit " + job + " --steps 10 --result " + (dir / "bed.json").string());
  INFO(ran.output, cluster.logs());
  REQUIRE(ran.code == 0);
  auto want = read_json(dir / "loopback.json");
  auto got = read_json(dir / "bed.json");
  CHECK(got["loss_curve"] == want["loss_curve"]);
  // What node 1 sent crossed its interface: at least the traffic the job
  // counted from node 1 to node 0 (headers and TCP's own bytes on top).
  const double counted = got["traffic_bytes"][1][0].get<double>();
  CHECK(counted > 1e6);
  CHECK(static_cast<double>(bed.sent_bytes(1) - sent_before) >= counted);
  for (int code : cluster.shutdown()) CHECK(code == 0);
}
