// Agents on a network: each in a namespace of its own, over veth links
// through a bridge, some rate-limited (tests/net/net_bed.h). What loopback
// cannot show: traffic that crosses an interface, links slower than the
// work, links that are cut.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// Buckets sized by the link (train.buckets_by_link): over 200 Mbit/s a step's
// all-reduce of the MLP's 2.7 MB takes about 108 ms, far longer than its
// backward on any CPU this runs on, so the master picks buckets of at most
// 1 MiB (runtime/watch/bucket_sizing.h) once every node's pace and links are
// known (a few seconds in, of 100 steps of at least 108 ms each), and the run
// goes on from every node's memory with the new plan. With 2 nodes each
// gradient element's sum is one addition, the same whichever bucket carries
// it, so the losses are the straight run's with fixed buckets bit for bit,
// every step of them.
TEST_CASE("buckets sized by the link: a slow link gets smaller buckets mid-run, bit for bit as without") {
  auto dir = temp_dir() / "buckets";
  std::filesystem::create_directories(dir);
  const std::string job = root() + "/bench/mlp_synthetic.json --steps 100 --set train.batch_size=512";
  Ran local = run_rill("run " + job + " --nodes 2 --devices cpu:1 --ctrl-port 19915 --result " +
                       (dir / "fixed.json").string());
  REQUIRE_MESSAGE(local.code == 0, local.output);

  NetBed bed(2, {"200mbit", "200mbit"});
  NetCluster cluster(bed, dir, "--devices cpu:1 --join-timeout 30");
  cluster.wait_formed();
  Ran ran = cluster.rill("submit " + job + " --set train.buckets_by_link=true --follow --result " +
                         (dir / "sized.json").string(), 180);
  INFO(ran.output, cluster.logs());
  REQUIRE(ran.code == 0);
  auto fixed = read_json(dir / "fixed.json");
  auto sized = read_json(dir / "sized.json");
  REQUIRE(sized.contains("buckets_by_link"));
  const auto& buckets = sized["buckets_by_link"];
  CHECK(buckets["bytes"].get<int64_t>() <= int64_t{1} << 20);
  CHECK(buckets["from_step"].get<int64_t>() > 0);
  CHECK(buckets["from_step"].get<int64_t>() < 100);
  CHECK(buckets["reason"].get<std::string>().find("outlasts the backward") != std::string::npos);
  CHECK(ran.output.find("buckets sized by the link: ") != std::string::npos);
  CHECK(ran.output.find("going on from step " + std::to_string(buckets["from_step"].get<int64_t>()) + " with ") !=
        std::string::npos);
  CHECK(sized["loss_curve"].size() == 100);
  CHECK(sized["loss_curve"] == fixed["loss_curve"]);
  CHECK(sized["variables"] == fixed["variables"]);
  for (int code : cluster.shutdown()) CHECK(code == 0);
}

// A straggler that computes as fast as the others: node 2 is behind a link
// 50 times slower than theirs (20 Mbit/s against 1 Gbit/s, both ways). Every
// node waits for it alike, so its device time per step does not single it
// out; the rate its data connections carry while busy (the kernel's
// counters, runtime/watch/link_pace.h) does: the master's status names node
// 2's link, and its log says so once; nodes 0 and 1 are never named. (Three
// agents on a 2-core machine share cores, so the device-time report may name
// any of them: it is not checked here.)
TEST_CASE("one node behind a much slower link: the master's status names it") {
  auto dir = temp_dir() / "slow-link";
  NetBed bed(3, {"1gbit", "1gbit", "20mbit"});
  NetCluster cluster(bed, dir, "--devices cpu:1 --join-timeout 30");
  cluster.wait_formed();
  Ran ran;
  std::thread job([&] {
    ran = cluster.rill("submit " + root() + "/bench/mlp_synthetic.json --steps 2000 --set train.batch_size=384", 180);
  });
  std::string named, last;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < 120 && std::chrono::steady_clock::now() < deadline; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Ran status = cluster.rill("status", 15);
    if (status.code != 0) continue;
    last = status.output;
    const size_t at = last.find("slow link: ");
    if (at != std::string::npos) {
      named = last.substr(at, last.find('\n', at) - at);
      break;
    }
  }
  Ran stopped = cluster.rill("stop", 30);
  job.join();
  INFO(last, cluster.logs());
  CHECK(stopped.code == 0);
  CHECK_MESSAGE(ran.code == 0, ran.output);
  CHECK(named.rfind("slow link: node 2 (", 0) == 0);
  // Every node's row has its fastest link's rate.
  size_t rows = 0;
  for (size_t at = last.find(" MB/s"); at != std::string::npos; at = last.find(" MB/s", at + 1)) ++rows;
  CHECK(rows == 3);
  const std::string master_log = cluster.agent(0).output();
  CHECK(master_log.find("node 2 (10.213.0.3:19900) is behind a slow link") != std::string::npos);
  CHECK(master_log.find("node 0 (10.213.0.1:19900) is behind a slow link") == std::string::npos);
  CHECK(master_log.find("node 1 (10.213.0.2:19900) is behind a slow link") == std::string::npos);
  for (int code : cluster.shutdown()) CHECK(code == 0);
}

// A launched program's ranks on 2 machines of 2 ranks each: a large
// all-reduce goes within each machine first (comm/collective_tiers.cc), so
// each machine sends its tensor across once. The demo sums 4 MiB: in a flat
// ring of the 4 ranks, the rank at each machine's edge would pass on 2 x 3/4
// of it (6 MiB); here each lane's ring of 2 ranks sends half of the
// lane's half twice, 2 MiB a rank, 4 MiB a machine. Node 0's interface
// counts what left it: 4 MiB and what else crosses (the rendezvous, the
// agents' messages, the small collectives, TCP/IP headers: a few percent),
// so under 5 MiB, where a flat ring would need over 6.
TEST_CASE("a launched program on 2 machines of 2 ranks sums within each machine first: its tensor crosses once") {
  const char* program = std::getenv("RILL_COLLECTIVES_PROGRAM");
  REQUIRE(program != nullptr);
  NetBed bed(2);
  const auto dir = temp_dir() / "tiers";
  std::filesystem::create_directories(dir);
  const std::string key = (dir / "cluster.key").string();
  std::filesystem::remove(key);
  REQUIRE(run_rill("keygen " + key).code == 0);
  const std::string flags = " --nnodes 2 --nproc_per_node 2 --master_addr " + NetBed::address(0) +
                            " --master_port 19900 --machines " + bed.machines() + " --key " + key + " ";
  const auto out1 = dir / "node1.out";
  Ran started = rill::testing::run_shell(bed.exec_prefix(1) + " " + rill::testing::binary() + " launch --node_rank 1" +
                                             flags + program + " > " + out1.string() + " 2>&1 &",
                                         10);
  REQUIRE(started.code == 0);
  const long long before = bed.sent_bytes(0);
  Ran ran = rill::testing::run_shell(
      bed.exec_prefix(0) + " " + rill::testing::binary() + " launch --node_rank 0" + flags + program, 120);
  const long long sent = bed.sent_bytes(0) - before;
  std::string other;  // node 1 ends on its own
  for (int i = 0; i < 100 && other.find("rank 3 of 4") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(out1);
    other.assign(std::istreambuf_iterator<char>(in), {});
  }
  INFO(ran.output);
  INFO(other);
  CHECK(ran.code == 0);
  for (const std::string& rank : {"rank 0", "rank 1"})
    CHECK(ran.output.find(rank + " of 4: sum [10, 20, 30]") != std::string::npos);
  for (const std::string& out : {ran.output, other})
    CHECK(out.find("; 4 MiB sum 10 (machines first)") != std::string::npos);
  CHECK(other.find("rank 2 of 4") != std::string::npos);
  CHECK(other.find("rank 3 of 4") != std::string::npos);
  CAPTURE(sent);
  CHECK(sent > 4ll << 20);
  CHECK(sent < 5ll << 20);
}
