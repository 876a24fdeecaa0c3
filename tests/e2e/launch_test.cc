// `rill launch`, one per node as torchrun is: job files, C++ programs on the
// job API, programs with their own collectives, and the mirrored view (DDP)
// as the seed's example runs it. Real agent processes on 127.0.0.x.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "process_util.h"
#include "runtime/cluster/cluster_config.h"

namespace {

using rill::testing::binary;
using rill::testing::Ran;
using rill::testing::root;
using rill::testing::run_rill;

// What a launcher started in the background wrote to `path`, once it holds
// `marker` (or after 10 s).
std::string output_of(const std::filesystem::path& path, const std::string& marker) {
  std::string text;
  for (int i = 0; i < 100 && text.find(marker) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  return text;
}

}  // namespace

TEST_CASE("rill launch: a job file from the usual environment variables, a C++ program from the seed's flags") {
  auto dir = rill::testing::temp_dir("rill-launch-");
  // Node 1 in the background, node 0 in the foreground; WORLD_SIZE counts
  // processes (nodes x nproc_per_node), as torchrun's does.
  std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=19220 WORLD_SIZE=2 LOCAL_RANK=0 ";
  std::string job = root() + "/samples/linear_regression/linear_regression.json";
  std::string node1 = "RANK=1 " + env + binary() + " launch --machines 127.0.0.1,127.0.0.2 --logdir " +
                      (dir / "launch").string() + " " + job + " > " + (dir / "launch1.out").string() + " 2>&1 &";
  REQUIRE(std::system(node1.c_str()) == 0);
  std::string node0 = "RANK=0 " + env + binary() + " launch --machines 127.0.0.1,127.0.0.2 " + job;
  Ran ran = rill::testing::run_shell(node0);
  INFO(ran.output);
  CHECK(ran.code == 0);
  CHECK(ran.output.find("master_addr=127.0.0.1 from env MASTER_ADDR") != std::string::npos);
  CHECK(ran.output.find("step    500/500") != std::string::npos);
  // Node 1's agent logs to its launcher's --logdir.
  const std::string node1_log = output_of(rill::node_log_path((dir / "launch").string(), 1, -1), "joined a cluster");
  INFO(node1_log);
  CHECK(node1_log.find("node 1 (127.0.0.2:19220): joined a cluster of 2 node(s)") != std::string::npos);

  const char* program = std::getenv("RILL_MLP_PROGRAM");
  REQUIRE(program != nullptr);
  std::string flags = " --nnodes 2 --nproc_per_node 1 --master_addr 127.0.0.1 --master_port 19230 --machines "
                      "127.0.0.1,127.0.0.2 ";
  std::string program1 = binary() + " launch --node_rank 1" + flags + program + " cpu:1 30 > " +
                         (dir / "program1.out").string() + " 2>&1 &";
  REQUIRE(std::system(program1.c_str()) == 0);
  Ran submitted = run_rill("launch --node_rank 0" + flags + program + " cpu:1 30");
  INFO(submitted.output);
  CHECK(submitted.code == 0);
  CHECK(submitted.output.find("step     30/30") != std::string::npos);
}

// A program's own collectives: 2 launchers (127.0.0.1 and 127.0.0.2) x 2
// processes; each process gets its communicator from the environment
// rill launch sets (rill::env::communicator: the ranks meet at MASTER_PORT
// + 2). Rank r holds [r + 1, 2 (r + 1), 3 (r + 1)]: small integers, exact.
TEST_CASE("rill launch: a program's ranks find each other from the environment and run collectives") {
  const char* program = std::getenv("RILL_COLLECTIVES_PROGRAM");
  REQUIRE(program != nullptr);
  // Without a key, and with one (--key: the rendezvous and every
  // connection between the ranks are CurveZMQ).
  for (bool keyed : {false, true}) {
    CAPTURE(keyed);
    auto dir = rill::testing::temp_dir(keyed ? "rill-launch-keyed-" : "rill-launch-");
    std::string key;
    if (keyed) {
      std::filesystem::remove(dir / "cluster.key");
      Ran made = run_rill("keygen " + (dir / "cluster.key").string());
      REQUIRE(made.code == 0);
      key = " --key " + (dir / "cluster.key").string();
    }
    std::string flags = " --nnodes 2 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port " +
                        std::string(keyed ? "19490" : "19480") + " --machines 127.0.0.1,127.0.0.2" + key + " ";
    const auto out1 = dir / "collectives1.out";
    std::string node1 = binary() + " launch --node_rank 1" + flags + program + " > " + out1.string() + " 2>&1 &";
    REQUIRE(std::system(node1.c_str()) == 0);
    Ran ran = run_rill("launch --node_rank 0" + flags + program);
    INFO(ran.output);
    CHECK(ran.code == 0);
    const std::string all = " of 4: sum [10, 20, 30] max [4, 8, 12] average [2.5, 5, 7.5]";
    CHECK(ran.output.find("rank 0" + all + " gathered [1, 2, 3, 2, 4, 6, 3, 6, 9, 4, 8, 12]") != std::string::npos);
    CHECK(ran.output.find("rank 1" + all) != std::string::npos);
    const std::string other = output_of(out1, "rank 3");  // node 1 ends on its own
    INFO(other);
    CHECK(other.find("rank 2" + all) != std::string::npos);
    CHECK(other.find("rank 3" + all) != std::string::npos);
    // 2 nodes of 2 ranks, as the launchers laid them out: a large
    // all-reduce goes within each node first (comm/collective_tiers.cc);
    // tests/net counts the bytes that cross between two machines.
    for (const std::string& out : {ran.output, other})
      CHECK(out.find("; 4 MiB sum 10 (machines first)") != std::string::npos);
  }
}

// A program's device collectives (rill::env::device_communicator; on cpu
// slots host memory), all eleven: 2 launchers x 2 processes, the 4 ranks
// across 2 nodes. Rank r holds x[i] = (i + 1) (r + 1), i < 8, and sends
// rank q a block of 100 r + q; averages of four such are exact in binary
// (k / 4): every value exact, every rank's result checked.
TEST_CASE("rill launch: a program's device collectives from the environment, across two launchers") {
  const char* program = std::getenv("RILL_DEVICE_COLLECTIVES_PROGRAM");
  REQUIRE(program != nullptr);
  auto dir = rill::testing::temp_dir("rill-launch-device-");
  const std::string flags =
      " --nnodes 2 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port 19710 --machines 127.0.0.1,127.0.0.2 ";
  const auto out1 = dir / "device1.out";
  const std::string node1 = binary() + " launch --node_rank 1" + flags + program + " > " + out1.string() + " 2>&1 &";
  REQUIRE(std::system(node1.c_str()) == 0);
  Ran ran = run_rill("launch --node_rank 0" + flags + program);
  INFO(ran.output);
  CHECK(ran.code == 0);
  const std::string other = output_of(out1, "rank 3");  // node 1 ends on its own
  INFO(other);
  const std::string all = ran.output + other;
  const std::string reductions =
      " of 4 (host): sum [10, 20, 30, 40, 50, 60, 70, 80] max [4, 8, 12, 16, 20, 24, 28, 32] average [2.5, 5, 7.5, "
      "10, 12.5, 15, 17.5, 20] block ";
  const std::string gathered = " gathered [1, 2, 2, 4, 3, 6, 4, 8] received ";
  const std::string broadcast = " broadcast [4, 8, 12, 16, 20, 24, 28, 32] scattered ";  // rank 3's
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    std::string received;
    for (int q = 0; q < 4; ++q) received += fmt::format("{}{}, {}", q ? ", " : "", 100 * q + r, 100 * q + r);
    const int last = (r + 3) % 4 + 1;  // the rank before's first two: (1, 2) times its r + 1
    const std::string line = fmt::format("rank {}{}[{}, {}]{}[{}]{}[{}, {}] passed [{}, {}]", r, reductions,
                                         10 * (2 * r + 1), 10 * (2 * r + 2), gathered, received, broadcast, 300 + r,
                                         300 + r, last, 2 * last);
    CHECK(all.find(line) != std::string::npos);
  }
  // The rooted calls' root is the last rank (no offset of 0 to hide behind).
  CHECK(all.find("passed [3, 6] reduced [10, 20, 30, 40, 50, 60, 70, 80] at root [1, 2, 2, 4, 3, 6, 4, 8]") !=
        std::string::npos);
}

// The seed's DDP example (samples/ddp/ddp_train.json, train.view
// "mirrored"): `rill launch --nproc_per_node 2` on one node prints each
// rank's "N/500 loss:..." lines and its own replica of w. Least squares on
// exact data, converged: w is [2, 3] far within 1e-3 on any CPU.
TEST_CASE("rill launch --nproc_per_node 2 runs the seed's DDP example: each rank's losses, then its w = [2, 3]") {
  const auto logdir = rill::testing::temp_dir("rill-launch-");
  Ran ran = run_rill("launch --nproc_per_node 2 --master_port 19500 --http 127.0.0.1:19505 --logdir " +
                     logdir.string() + " " + root() + "/samples/ddp/ddp_train.json");
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  // --http places node 0's dashboard (its agent's log says where).
  std::ifstream agent_log(rill::node_log_path(logdir.string(), 0, -1));
  const std::string log((std::istreambuf_iterator<char>(agent_log)), std::istreambuf_iterator<char>());
  CHECK(log.find("dashboard at http://127.0.0.1:19505/") != std::string::npos);
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    const std::string prefix = "[rank" + std::to_string(rank) + "] ";
    for (int step = 50; step <= 500; step += 50)
      CHECK(ran.output.find(prefix + std::to_string(step) + "/500 loss:") != std::string::npos);
    std::smatch w;
    const std::regex pattern("\\[rank" + std::to_string(rank) + "\\] w:\\[\\[([-0-9.]+)\\], \\[([-0-9.]+)\\]\\]");
    REQUIRE(std::regex_search(ran.output, w, pattern));
    CHECK(std::abs(std::stod(w[1].str()) - 2.0) < 1e-3);
    CHECK(std::abs(std::stod(w[2].str()) - 3.0) < 1e-3);
  }
  // The model is printed once training is done.
  CHECK(ran.output.find("[rank0] 500/500 loss:") < ran.output.find("[rank0] w:"));
}

// Collectives as ops of a mirrored job, across 2 agents (each rank its own
// process on its own address, the exchanges over ZeroMQ): every rank prints
// the mean of the ranks' losses (an all_reduce) and the gathered
// predictions of both ranks (an all_gather), the same on each. Converged
// least squares: the predictions are the targets far within 1e-3.
TEST_CASE("collectives as ops of a mirrored job on 2 agents: all_reduce of the losses, all_gather of the predictions") {
  Ran ran = run_rill("run " + root() + "/samples/ddp/ddp_collectives.json --nodes 2 --devices cpu:1 --ctrl-port 19540");
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  std::vector<std::string> means;
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    std::smatch m;
    const std::regex mean("\\[rank" + std::to_string(rank) + "\\] 500/500 loss:\\S+ mean_loss:(\\S+)");
    REQUIRE(std::regex_search(ran.output, m, mean));
    means.push_back(m[1].str());
    const std::regex gathered("\\[rank" + std::to_string(rank) +
                              "\\] all_pred:\\[\\[([-0-9.]+)\\], \\[([-0-9.]+)\\], \\[([-0-9.]+)\\], \\[([-0-9.]+)\\]\\]");
    REQUIRE(std::regex_search(ran.output, m, gathered));
    const double want[] = {8, 13, 26, 9};
    for (int i = 0; i < 4; ++i) CHECK(std::abs(std::stod(m[i + 1].str()) - want[i]) < 1e-3);
  }
  CHECK(means[0] == means[1]);  // one all-reduced value, printed alike
}

// --device cuda gives the node's agent a GPU a slot: on a machine with fewer
// GPUs than slots (CI's have none) the job stops at once naming what it
// asked for and what there is.
TEST_CASE("rill launch --device cuda asks the agent for a GPU a slot, and says so where there are too few") {
  const int slots = 9;  // more than any machine here has
  Ran ran = run_rill("launch --device cuda --nproc_per_node " + std::to_string(slots) +
                     " --master_port 19236 --machines 127.0.0.1 " + root() +
                     "/samples/linear_regression/linear_regression.json");
  INFO(ran.output);
  CHECK(ran.code != 0);
  CHECK(ran.output.find("cuda:" + std::to_string(slots)) != std::string::npos);
  CHECK(ran.output.find("CUDA device(s)") != std::string::npos);
  Ran bad = run_rill("launch --device tpu " + root() + "/samples/linear_regression/linear_regression.json");
  CHECK(bad.code != 0);
  CHECK(bad.output.find("tpu") != std::string::npos);
}

// A program's arguments are its own, dashes and all, even those that name a
// launcher flag (torchrun's way); `--` before the program is allowed. A
// process that fails is named with its rank and how it ended.
TEST_CASE("rill launch passes a program's arguments unchanged and names a process that fails") {
  const std::string flags = " --http off --master_port 19760 ";
  Ran echo = run_rill("launch" + flags + "/bin/echo hello -x --foo bar --nproc_per_node 2 --lr=0.1");
  INFO(echo.output);
  CHECK(echo.code == 0);
  CHECK(echo.output.find("\nhello -x --foo bar --nproc_per_node 2 --lr=0.1\n") != std::string::npos);
  CHECK(echo.output.find("nproc_per_node=1 from default") != std::string::npos);  // one process, not two
  Ran dashed = run_rill("launch" + flags + "-- /bin/sh -c 'echo rank $RANK of $WORLD_SIZE'");
  INFO(dashed.output);
  CHECK(dashed.output.find("rank 0 of 1") != std::string::npos);
  // A flag (no value) just before the program leaves the program whole.
  const auto logs = rill::testing::temp_dir("rill-launch-args-");
  Ran flagged = run_rill("launch" + flags + "--logdir " + logs.string() +
                         " --redirect_stdout_and_stderr /bin/echo flagged --lr 3");
  INFO(flagged.output);
  CHECK(flagged.code == 0);
  CHECK(rill::testing::read_text((logs / "node0.proc0.log").string()) == "flagged --lr 3\n");
  // A job file takes no arguments: what follows it is refused, not dropped.
  Ran trailing = run_rill("launch" + flags + root() + "/samples/linear_regression/linear_regression.json --nnodes 2");
  INFO(trailing.output);
  CHECK(trailing.code == 1);
  CHECK(trailing.output.find("'--nnodes 2' after the job file") != std::string::npos);
  Ran failed = run_rill("launch" + flags + "/bin/sh -c 'exit 3'");
  INFO(failed.output);
  CHECK(failed.code == 3);
  CHECK(failed.output.find("/bin/sh (RANK 0, LOCAL_RANK 0) exited with code 3") != std::string::npos);
  // An exit code above 128 is a code, not a signal; a signal is a signal.
  Ran high = run_rill("launch" + flags + "/bin/sh -c 'exit 130'");
  CHECK(high.output.find("(RANK 0, LOCAL_RANK 0) exited with code 130") != std::string::npos);
  Ran killed = run_rill("launch" + flags + "/bin/sh -c 'kill -9 $$'");
  CHECK(killed.output.find("(RANK 0, LOCAL_RANK 0) ended by signal 9") != std::string::npos);
}

// A machine list that disagrees with --nnodes is refused before anything
// starts; a launcher waiting for a cluster that never forms (node 1 is not
// started) ends on SIGTERM, as Slurm's scancel sends it, and takes its agent
// with it.
TEST_CASE("rill launch refuses --nnodes against a shorter machine list, and a SIGTERM ends its wait for the cluster") {
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";
  Ran refused = run_rill("launch --http off --nnodes 3 --node_rank 0 --master_port 19765 --machines "
                         "127.0.0.1,127.0.0.2 " + job);
  INFO(refused.output);
  CHECK(refused.code != 0);
  CHECK(refused.output.find("nnodes=3 (from flag) but the machine list 127.0.0.1,127.0.0.2 names 2 node(s)") !=
        std::string::npos);
  Ran stopped = rill::testing::run_shell(
      binary() + " launch --http off --nnodes 2 --node_rank 0 --master_port 19765 --machines 127.0.0.1,127.0.0.2 " +
          job + " & launcher=$!; sleep 2; kill -TERM $launcher; wait $launcher; echo \"launcher exit $?\"; sleep 1; "
                "pgrep -f 'ctrl-port 1976[5]' >/dev/null && echo 'agent left' || echo 'agent gone'",
      60);
  INFO(stopped.output);
  CHECK(stopped.output.find("interrupted while waiting for the master 127.0.0.1:19765") != std::string::npos);
  CHECK(stopped.output.find("launcher exit 143") != std::string::npos);  // 128 + SIGTERM
  CHECK(stopped.output.find("agent gone") != std::string::npos);
  CHECK(stopped.seconds < 30);
}

// A launcher of programs, or of a node that does not submit, passes SIGTERM
// on to what it started (as torchrun does) and ends when they have: no
// process, and no agent, is left behind, and an agent so ended is not
// started again.
TEST_CASE("rill launch passes SIGTERM on to its processes and agent, and ends with them") {
  Ran programs = rill::testing::run_shell(
      binary() + " launch --http off --master_port 19780 --nproc_per_node 2 /bin/sleep 60 & launcher=$!; sleep 2; "
                 "kill -TERM $launcher; wait $launcher; echo \"launcher exit $?\"; sleep 1; "
                 "pgrep -f 'ctrl-port 1978[0]' >/dev/null && echo 'agent left' || echo 'agent gone'",
      60);
  INFO(programs.output);
  CHECK(programs.output.find("/bin/sleep (RANK 1, LOCAL_RANK 1) ended by signal 15") != std::string::npos);
  CHECK(programs.output.find("launcher exit 143") != std::string::npos);
  CHECK(programs.output.find("agent gone") != std::string::npos);
  CHECK(programs.seconds < 30);
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";
  Ran node1 = rill::testing::run_shell(
      binary() + " launch --http off --nnodes 2 --node_rank 1 --master_port 19780 --machines 127.0.0.1,127.0.0.2 "
                 "--max_restarts 3 " + job + " & launcher=$!; sleep 2; kill -TERM $launcher; wait $launcher; "
                 "echo \"launcher exit $?\"; sleep 1; "
                 "pgrep -f 'ctrl-port 1978[0]' >/dev/null && echo 'agent left' || echo 'agent gone'",
      60);
  INFO(node1.output);
  CHECK(node1.output.find("launcher exit 143") != std::string::npos);
  CHECK(node1.output.find("starting it again") == std::string::npos);
  CHECK(node1.output.find("agent gone") != std::string::npos);
  CHECK(node1.seconds < 30);
}
