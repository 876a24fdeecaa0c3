// Checkpoints across real agents: every node writes its own pieces, the
// master the meta.json that makes a step whole, and a cluster run resumes
// from them, bitwise where the order of sums is fixed (every collective
// layout), in trend where it is not (async parameter servers); on other
// node counts, every variable read back bitwise.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <sstream>
#include <thread>
#include <map>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_values.h"
#include "resume_check.h"
#include "process_util.h"
#include "run_results.h"

namespace {

using rill::testing::binary;
using rill::testing::Ran;
using rill::testing::read_json;
using rill::testing::root;
using rill::testing::run_rill;
using rill::testing::ten_step_curve;

std::filesystem::path temp_dir() { return rill::testing::temp_dir("rill-checkpoint-"); }

// Whether the cluster of `master` has every node joined, within 60 s (a
// refused connection is reported at once: tries are bounded by the clock).
bool formed(const std::string& master) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < 600 && std::chrono::steady_clock::now() < deadline; ++i) {
    Ran status = run_rill("status --master " + master);
    if (status.code == 0 && status.output.find("up (master)") != std::string::npos &&
        status.output.find("joining") == std::string::npos && status.output.find("not joined") == std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}


}  // namespace

using rill::testing::check_resume_bitwise;

TEST_CASE("every node writes its own checkpoint pieces, and a cluster run resumes from them") {
  check_resume_bitwise(root() + "/samples/mlp/mlp.json --nodes 2 --devices cpu:1 --ctrl-port 19200", "ckpt");
}

// 2-D variables: w1, b1, w2 split within each node and the same on both
// nodes; the checkpoint holds each once, assembled from one node's pieces.
TEST_CASE("the hybrid job (2-D SBP) on 2 nodes x 2 devices checkpoints and resumes bitwise") {
  check_resume_bitwise(root() + "/samples/mlp/mlp_hybrid.json --nodes 2 --devices cpu:2 --ctrl-port 19370",
                       "ckpt_hybrid");
}

// Each stage's variables live on one node; the master gathers them all.
TEST_CASE("the job in two stages on 2 nodes checkpoints and resumes bitwise") {
  check_resume_bitwise(root() + "/samples/mlp/mlp_stages.json --nodes 2 --ctrl-port 19400", "ckpt_stages");
}

// A resumed run reads on from the first micro-batch of its first step.
TEST_CASE("the two stages with 4 micro-batches checkpoint and resume bitwise") {
  check_resume_bitwise(root() + "/samples/mlp/mlp_pipeline.json --nodes 2 --ctrl-port 19410", "ckpt_pipeline");
}

// Every layout of the blocks computes the same numbers as collective mode
// with 2 trainers (the pserver adds two pieces: a + b = b + a; the reasons
// in tests/runtime/pserver_test.cc), so on real agents too the loss curves
// of both split methods, slice_var_up on and off, equal collective mode's
// bit for bit.
TEST_CASE("pserver layouts on real agents: HashName and slice_var_up off give collective mode's losses") {
  const std::string job = root() + "/samples/pserver/mlp_pserver.json";
  auto want = ten_step_curve(job + " --nodes 2 --set distributed.mode=collective --set distributed.pservers= "
                                   "--ctrl-port 19620",
                             temp_dir() / "ps_collective.json");
  auto hashed = ten_step_curve(job + " --nodes 4 --set distributed.split_method=HashName --ctrl-port 19630",
                               temp_dir() / "ps_hashed.json");
  auto whole = ten_step_curve(job + " --nodes 4 --set distributed.slice_var_up=false --ctrl-port 19640",
                              temp_dir() / "ps_whole.json");
  CHECK(hashed == want);
  CHECK(whole == want);
}

// The blocks live on the pservers; the master gathers them into the model's
// own variables, in the format of every other mode.
TEST_CASE("pserver mode checkpoints the variables whole (not their blocks) and resumes bitwise") {
  const auto resumed =
      check_resume_bitwise(root() + "/samples/pserver/mlp_pserver.json --nodes 4 --ctrl-port 19570", "ckpt_pserver");
  auto c = rill::read_checkpoint((resumed.dir / "step-00000060").string());
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  bool whole_w1 = false, blocks = false;
  for (const rill::CheckpointTensor& t : c->tensors) {
    whole_w1 = whole_w1 || (t.name == "w1" && t.shape == rill::Shape{784, 512});
    blocks = blocks || t.name.find(".block") != std::string::npos;
  }
  CHECK(whole_w1);
  CHECK_FALSE(blocks);
}

// Async mode (with DC-ASGD) checkpoints each block when its first lane has
// applied the step's gradient, and a resumed run starts every lane from the
// restored values and momentum (DC-ASGD's moving average starts afresh, as
// at the job's start). The order of updates varies from run to run, so the
// runs agree only in trend: a resumed run's losses are where the straight
// run's were at the same steps (their means within 20%: per-batch losses at
// steps 40-59 of this MLP are 0.6-0.9 and move 0.1-0.2 between batches;
// measured means 0.78 and 0.75), and far below the first ten steps' (1.75),
// which a run that lost its checkpoint would repeat.
TEST_CASE("async pserver mode with DC-ASGD checkpoints the variables whole and resumes from them") {
  const std::string job = root() + "/samples/pserver/mlp_pserver.json --nodes 4 --ctrl-port 19650 --steps 60 "
                                   "--set distributed.sync_mode=false --set distributed.enable_dc_asgd=true";
  auto dir = temp_dir() / "ckpt_async";
  std::filesystem::remove_all(dir);
  auto straight = temp_dir() / "ckpt_async_straight.json";
  auto resumed = temp_dir() / "ckpt_async_resumed.json";
  Ran a = run_rill("run " + job + " --set checkpoint.dir=" + dir.string() + " --set checkpoint.every=20 --result " +
                   straight.string());
  INFO(a.output);
  REQUIRE(a.code == 0);
  REQUIRE(rill::testing::checkpoint_complete(dir, 40));
  Ran b = run_rill("run " + job + " --resume " + (dir / "step-00000040").string() + " --result " + resumed.string());
  INFO(b.output);
  REQUIRE(b.code == 0);
  auto x = read_json(straight)["loss_curve"];
  auto y = read_json(resumed)["loss_curve"];
  REQUIRE(x.size() == 60);
  REQUIRE(y.size() == 20);
  double first = 0, late = 0, again = 0;
  for (size_t i = 0; i < 10; ++i) first += x[i].get<double>() / 10;
  for (size_t i = 0; i < 20; ++i) {
    late += x[40 + i].get<double>() / 20;
    again += y[i].get<double>() / 20;
  }
  CAPTURE(first);
  CAPTURE(late);
  CAPTURE(again);
  CHECK(std::abs(again - late) < 0.2 * late);
  CHECK(again < 0.7 * first);
}

// A slow disk slows training (the master's own variables wait for room
// among the checkpoints waiting to be written), never the master's control
// loop: it stores other nodes' pieces without waiting and keeps sending
// heartbeats, so no node is declared lost. Every checkpoint write here takes
// 2 s longer, a checkpoint comes after every step, the weights are split
// over both nodes, and a node silent for 1.5 s would be lost.
TEST_CASE("a slow checkpoint disk slows the job but the cluster stays whole") {
  auto dir = temp_dir() / "slow-disk";
  std::filesystem::remove_all(dir);
  const std::string machines = " --machines 127.0.0.1:19380,127.0.0.2:19380 --devices cpu:1 --heartbeat 0.2 --dead-after 1.5";
  rill::testing::Agent node0(machines + " --rank 0 --http off --checkpoint-write-delay 2",
                             (temp_dir() / "slow0.log").string());
  rill::testing::Agent node1(machines + " --rank 1", (temp_dir() / "slow1.log").string());
  REQUIRE(formed("127.0.0.1:19380"));
  Ran ran = run_rill("submit " + root() + "/samples/mlp/mlp_model_parallel.json --master 127.0.0.1:19380 --steps 4" +
                     " --set checkpoint.dir=" + dir.string() + " --set checkpoint.every=1 --set checkpoint.keep=10 --follow",
                     180);
  INFO(ran.output);
  INFO(node0.output());
  INFO(node1.output());
  CHECK(ran.code == 0);
  for (int step = 1; step <= 4; ++step) CHECK(rill::testing::checkpoint_complete(dir, step));
  CHECK(node0.output().find("lost") == std::string::npos);
  CHECK(node1.output().find("lost") == std::string::npos);
  Ran down = run_rill("shutdown --master 127.0.0.1:19380");
  CHECK(down.code == 0);
}

// A disk slower than the stall timeout: node 1 writes each file of a step
// over 6 s (spread over its 10 chunks) and the job allows 3 s without an
// act. At steps 3 and 4 node 1's training waits about 6 s for its disk (one
// step's file waits in memory while another is written) and node 0 waits
// for node 1; after the run node 1 still writes two files, 12 s, past the
// master's wait for its Done (the stall timeout and 5 s). The writes going on are word
// that the cluster is alive: node 1's heartbeats carry its bytes, the
// master's carry them to node 0, and every run, collective and wait for a
// Done counts them. Without that the job ended "stuck".
TEST_CASE("training that waits for a checkpoint disk slower than the stall timeout goes on to the end") {
  auto dir = temp_dir() / "slower-than-stall";
  std::filesystem::remove_all(dir);
  const auto result = temp_dir() / "slower-than-stall.json";
  const std::string machines =
      " --machines 127.0.0.1:19470,127.0.0.2:19470 --devices cpu:1 --heartbeat 0.2 --stall-timeout 3";
  rill::testing::Agent node0(machines + " --rank 0 --http off", (temp_dir() / "slower0.log").string());
  rill::testing::Agent node1(machines + " --rank 1 --checkpoint-write-delay 6", (temp_dir() / "slower1.log").string());
  REQUIRE(formed("127.0.0.1:19470"));
  Ran ran;
  std::atomic<bool> ended{false};
  std::thread submitter([&] {
    ran = run_rill("submit " + root() + "/samples/mlp/mlp_model_parallel.json --master 127.0.0.1:19470 --steps 4" +
                       " --set checkpoint.dir=" + dir.string() +
                       " --set checkpoint.every=1 --set checkpoint.keep=10 --follow --result " + result.string(),
                   180);
    ended = true;
  });
  // `rill status` names the file node 1 writes while the job waits for it.
  std::string seen;
  for (int i = 0; i < 300 && !ended.load() && seen.empty(); ++i) {
    Ran status = run_rill("status --master 127.0.0.1:19470", 10);
    std::istringstream lines(status.output);
    for (std::string line; std::getline(lines, line);)
      if (line.starts_with("1 ") && line.find("writing the checkpoint of step ") != std::string::npos) seen = line;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  submitter.join();
  CHECK_MESSAGE(!seen.empty(), "rill status never showed node 1 writing a checkpoint");
  INFO(ran.output);
  INFO(node0.output());
  INFO(node1.output());
  REQUIRE(ran.code == 0);
  for (int step = 1; step <= 4; ++step) CHECK(rill::testing::checkpoint_complete(dir, step));
  auto j = read_json(result);
  REQUIRE(j["checkpoints"].size() == 4);
  double longest_block_ms = 0;
  for (const auto& c : j["checkpoints"]) longest_block_ms = std::max(longest_block_ms, c["block_ms"].get<double>());
  CHECK(longest_block_ms > 3000);  // training did wait for the disk longer than the stall timeout
  // Node 1's log says so, once, with what to do.
  const std::string log = node1.output();
  const size_t warned = log.find("checkpoints come faster than the disk writes them");
  CHECK(warned != std::string::npos);
  CHECK(log.find("checkpoints come faster than the disk writes them", warned + 1) == std::string::npos);
  Ran down = run_rill("shutdown --master 127.0.0.1:19470");
  CHECK(down.code == 0);
}

// A disk that stops writing is a stall, named: the linear regression in
// pserver mode with node 1 the pserver (it writes w), its rpc_deadline (the
// stall timeout of a pserver job) 2 s, and each of node 1's files taking 5 s
// after its last byte. Training waits for the disk from step 3 with no byte
// written meanwhile: the job fails as stuck, and its error says node 1 was
// writing its checkpoint of step 1. What was handed to the writer (steps 1
// and 2) is still written, for a restart to resume from.
TEST_CASE("a checkpoint disk that stops writing is a stall whose error names the node writing") {
  auto dir = temp_dir() / "stopped-disk";
  std::filesystem::remove_all(dir);
  const std::string machines = " --machines 127.0.0.1:19474,127.0.0.2:19474 --devices cpu:1 --heartbeat 0.2";
  rill::testing::Agent node0(machines + " --rank 0 --http off", (temp_dir() / "stopped0.log").string());
  rill::testing::Agent node1(machines + " --rank 1 --checkpoint-write-delay 5", (temp_dir() / "stopped1.log").string());
  REQUIRE(formed("127.0.0.1:19474"));
  Ran ran = run_rill("submit " + root() + "/samples/linear_regression/linear_regression.json --master 127.0.0.1:19474" +
                         " --steps 6 --set distributed.mode=pserver --set distributed.pservers=1" +
                         " --set distributed.rpc_deadline=2000 --set checkpoint.dir=" + dir.string() +
                         " --set checkpoint.every=1 --set checkpoint.keep=10",
                     180);
  INFO(ran.output);
  INFO(node1.output());
  CHECK(ran.code != 0);
  CHECK(ran.output.find("job stuck") != std::string::npos);
  CHECK(ran.output.find("127.0.0.2:19474) was writing its checkpoint of step 1") != std::string::npos);
  CHECK(rill::testing::checkpoint_complete(dir, 2));  // handed over before the stall: written all the same
  Ran down = run_rill("shutdown --master 127.0.0.1:19474");
  CHECK(down.code == 0);
}

namespace {

// The variables (not the optimizer state) of a checkpoint step, by name.
std::map<std::string, std::vector<float>> variables_of(const std::filesystem::path& step_dir) {
  auto c = rill::read_checkpoint(step_dir.string());
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  std::map<std::string, std::vector<float>> out;
  for (rill::CheckpointTensor& t : c->tensors)
    if (t.name.find('/') == std::string::npos) out[t.name] = std::move(t.values);
  return out;
}

}  // namespace

// The MLP data parallel on 2 and on 3 agents: its replicated variables are
// written once, spread over the nodes' files (w1 on node 0, the rest after
// it by size), no values pass through the master, and each step resumes on
// other node counts (2 nodes' on 1 and 3, 3 nodes' on 2). With a learning
// rate of 1e-30 a momentum step leaves every weight as it was: w - 1e-30 v
// rounds to w wherever 1e-30 |v| is below half an ulp of w (|v| of
// gradients here is below 10, every nonzero |w| far above 1e-20), and a
// weight that is exactly 0 with it (a dead unit's bias) has v == 0 too. So
// the resumed run's checkpoint holds the written checkpoint's variables bit
// for bit: the pieces were read back and laid out for the other layout
// exactly.
TEST_CASE("a checkpoint 2 or 3 nodes wrote themselves resumes on other node counts, every variable bitwise") {
  const std::string job = root() + "/samples/mlp/mlp.json --devices cpu:1 --set train.batch_size=240";
  int port = 19100;  // each cluster its own
  for (const auto& [writers, resumes] : {std::pair<int, std::vector<int>>{2, {1, 3}}, {3, {2}}}) {
    CAPTURE(writers);
    const auto dir = temp_dir() / ("ckpt_per_node_" + std::to_string(writers));
    std::filesystem::remove_all(dir);
    const auto result = temp_dir() / ("ckpt_per_node_" + std::to_string(writers) + ".json");
    Ran a = run_rill("run " + job + " --nodes " + std::to_string(writers) + " --ctrl-port " + std::to_string(port += 4) +
                     " --steps 20 --set checkpoint.dir=" + dir.string() + " --set checkpoint.every=10 --result " +
                     result.string());
    INFO(a.output);
    REQUIRE(a.code == 0);
    const auto step = dir / "step-00000020";
    for (int node = 0; node < writers; ++node)
      CHECK(std::filesystem::exists(step / ("node-" + std::to_string(node) + ".safetensors")));
    CHECK_FALSE(std::filesystem::exists(step / "model.safetensors"));
    // What passed through the master's control plane during training: far
    // less than one copy of the model (w1 alone is 1.6 MB, with its momentum 3.2).
    auto j = read_json(result);
    CHECK(j["checkpoints_written"] == 2);
    REQUIRE(j["checkpoints"].size() == 2);
    CHECK(j["checkpoints"][1]["files"] == writers);
    CHECK(j["checkpoints"][1]["bytes"].get<int64_t>() > 5000000);
    CHECK(j["control_bytes_from_nodes"].get<int64_t>() < 200000);
    const auto want = variables_of(step);
    REQUIRE(want.size() == 6);
    for (int nodes : resumes) {
      CAPTURE(nodes);
      const auto again = temp_dir() / ("ckpt_per_node_" + std::to_string(writers) + "_on_" + std::to_string(nodes));
      std::filesystem::remove_all(again);
      const std::string where =
          nodes == 1 ? "" : " --nodes " + std::to_string(nodes) + " --ctrl-port " + std::to_string(port += 4);
      Ran b = run_rill("run " + job + where + " --steps 21 --resume " + step.string() +
                       " --set optimizer.lr=1e-30 --set checkpoint.dir=" + again.string());
      INFO(b.output);
      REQUIRE(b.code == 0);
      CHECK(variables_of(again / "step-00000021") == want);
    }
  }
}

// A node killed while it writes its file of a step: the master never
// writes that step's meta.json, so the step is absent (its folder holds
// what the survivors wrote and the killed node's temporary file, never
// under a checkpoint file's name), and the newest checkpoint is the step
// before, whole. Node 1's writes take 3 s longer (a slow disk); it is
// killed once node 0's file of step 10 is there and step 5 is complete.
TEST_CASE("a node killed while writing its checkpoint file leaves that step absent, not torn") {
  auto dir = temp_dir() / "killed-writer";
  std::filesystem::remove_all(dir);
  const std::string machines =
      " --machines 127.0.0.1:19450,127.0.0.2:19450 --devices cpu:1 --heartbeat 0.2 --dead-after 1.5";
  rill::testing::Agent node0(machines + " --rank 0 --http off", (temp_dir() / "killed0.log").string());
  auto node1 = std::make_unique<rill::testing::Agent>(machines + " --rank 1 --checkpoint-write-delay 3",
                                                      (temp_dir() / "killed1.log").string());
  REQUIRE(formed("127.0.0.1:19450"));
  Ran submitted;
  std::thread submitter([&] {
    submitted = run_rill("submit " + root() + "/samples/mlp/mlp.json --master 127.0.0.1:19450 --steps 200" +
                             " --set checkpoint.dir=" + dir.string() +
                             " --set checkpoint.every=5 --set checkpoint.keep=10 --follow",
                         180);
  });
  bool ready = false;
  for (int i = 0; i < 1500 && !ready; ++i) {
    ready = rill::testing::checkpoint_complete(dir, 5) &&
            std::filesystem::exists(dir / "step-00000010" / "node-0.safetensors");
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  node1.reset();  // SIGKILL, mid-write (its write of step 10 takes 3 s)
  submitter.join();
  REQUIRE(ready);
  INFO(submitted.output);
  CHECK(submitted.code != 0);  // no --max-restarts: the job ends, naming the lost node
  CHECK(submitted.output.find("lost") != std::string::npos);
  CHECK_FALSE(rill::testing::checkpoint_complete(dir, 10));
  CHECK_FALSE(std::filesystem::exists(dir / "step-00000010" / "node-1.safetensors"));
  auto latest = rill::latest_checkpoint(dir.string());
  REQUIRE(latest.ok());
  CHECK(*latest == (dir / "step-00000005").string());
  CHECK(rill::read_checkpoint(*latest).ok());
  Ran down = run_rill("shutdown --master 127.0.0.1:19450");
  CHECK(down.code == 0);
}
