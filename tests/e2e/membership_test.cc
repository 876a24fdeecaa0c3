// Live membership on real agents: a data-parallel job that loses a node
// (SIGKILL) goes on from the other nodes' memory on the nodes that remain,
// losing at most the step in flight, to the model a run would reach that
// used every node up to that step and the others after; a layout whose
// variables are split across nodes cannot, and says why.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "process_util.h"

#include "runtime/cluster/client.h"

namespace {

using Clock = std::chrono::steady_clock;
using rill::testing::Agent;
using rill::testing::read_text;
using rill::testing::root;

std::string model_bytes(const std::filesystem::path& checkpoint_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return read_text((checkpoint_dir / name / "model.safetensors").string());
}

// Progress lines of a submitted job, and a wait for one of them.
struct Lines {
  std::mutex mu;
  std::vector<std::string> lines;
  void add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  }
  bool has(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    for (const std::string& l : lines)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }
  bool wait_for(const std::string& text, double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < deadline && !has(text)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return has(text);
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
  }
};

}  // namespace

// Why bit for bit: the survivors start step E from the variables and
// optimizer state they held after step E (every one the same: replicas of
// one all-reduced model), which a 3-node run of E steps writes to its
// checkpoint too; from there both runs are a 2-node plan of the same job,
// the same kernels on this machine and the same fixed-order sums over the
// same batches (each step's batch is fixed by its number).
TEST_CASE("a data-parallel job that loses a node goes on from the others' memory, to the model of a run on 3 "
          "nodes up to that step and 2 after") {
  auto dir = rill::testing::temp_dir("rill-membership-");
  const std::string machines = "127.0.0.1:19884,127.0.0.2:19884,127.0.0.3:19884";
  const std::string args = "--machines " + machines + " --join-timeout 30 --rank ";
  Agent master(args + "0", (dir / "a0.log").string());
  Agent one(args + "1", (dir / "a1.log").string());
  auto two = std::make_unique<Agent>(args + "2", (dir / "a2.log").string());
  auto client = rill::Client::connect("127.0.0.1:19884", 30);
  REQUIRE(client.ok());
  const std::string job = read_text(root() + "/samples/mlp/mlp.json");
  constexpr int64_t kSteps = 120;
  const auto options_for = [&](const std::filesystem::path& checkpoints, int64_t steps) {
    rill::SubmitOptions options;
    options.steps = steps;
    options.overrides = {"checkpoint.dir=" + checkpoints.string(), "checkpoint.every=1000", "train.log_every=1"};
    return options;
  };

  // Node 2 dies once step 30 is done.
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 2;
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool killed = false;
  std::thread killer([&] {
    if (!lines.wait_for("step     30/", 120)) return;
    kill(two->pid, SIGKILL);
    killed = true;
  });
  auto live = (*client)->submit_text(job, "mlp.json", options);
  killer.join();
  REQUIRE(live.ok());
  INFO(lines.all());
  INFO(live->result_json);
  REQUIRE(killed);
  REQUIRE(live->status.ok());
  auto result = nlohmann::json::parse(live->result_json);
  REQUIRE(result.contains("restarts"));
  REQUIRE(result["restarts"].size() == 1);
  const auto& r = result["restarts"][0];
  CHECK(r["error"].get<std::string>().find("node 2 (127.0.0.3:19884) lost") == 0);
  CHECK(r["from"] == "memory");
  CHECK(r["nodes"] == 2);
  const int64_t at = r["resumed_from_step"].get<int64_t>();
  // Step 30's loss was out, so every node had begun it: at least step 29
  // was done everywhere.
  CHECK(at >= 29);
  // At most the step in flight is lost.
  CHECK(r["steps_lost"].get<int64_t>() <= 1);
  CHECK(result["steps"] == kSteps);
  CHECK(lines.has(fmt::format("going on from step {} on the 2 node(s) that remain", at)));
  CHECK(lines.has("eval on"));  // the eval pass ran on the nodes that remain

  // The reference: the 3 nodes (node 2's agent back) for `at` steps, then 2
  // nodes of another cluster from that checkpoint to the end.
  two = std::make_unique<Agent>(args + "2", (dir / "a2-again.log").string());
  rill::SubmitOptions first = options_for(dir / "reference", at);
  first.max_restarts = 2;  // while node 2 is joining again, an attempt fails at once and waits for it
  auto part1 = (*client)->submit_text(job, "mlp.json", first);
  REQUIRE(part1.ok());
  INFO(part1->result_json);
  REQUIRE(part1->status.ok());
  const std::string pair = "127.0.0.1:19888,127.0.0.2:19888";
  Agent master2("--machines " + pair + " --join-timeout 30 --rank 0", (dir / "b0.log").string());
  Agent other2("--machines " + pair + " --join-timeout 30 --rank 1", (dir / "b1.log").string());
  auto client2 = rill::Client::connect("127.0.0.1:19888", 30);
  REQUIRE(client2.ok());
  rill::SubmitOptions second = options_for(dir / "reference", kSteps);
  second.resume = "latest";
  auto part2 = (*client2)->submit_text(job, "mlp.json", second);
  REQUIRE(part2.ok());
  INFO(part2->result_json);
  REQUIRE(part2->status.ok());
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(result["final_loss"] == nlohmann::json::parse(part2->result_json)["final_loss"]);
  (void)(*client)->shutdown();
  (void)(*client2)->shutdown();
  CHECK(master.wait(15) == 0);
  CHECK(master2.wait(15) == 0);
}

TEST_CASE("a job whose variables are split across nodes cannot go on without a lost node, and says why") {
  auto dir = rill::testing::temp_dir("rill-membership-");
  const std::string machines = "127.0.0.1:19892,127.0.0.2:19892";
  const std::string args = "--machines " + machines + " --join-timeout 30 --rank ";
  Agent master(args + "0", (dir / "p0.log").string());
  auto one = std::make_unique<Agent>(args + "1", (dir / "p1.log").string());
  auto client = rill::Client::connect("127.0.0.1:19892", 30);
  REQUIRE(client.ok());
  rill::SubmitOptions options;
  options.steps = 200;
  options.min_nodes = 1;
  options.overrides = {"train.log_every=1"};
  Lines lines;
  options.on_line = [&](const std::string& line) { lines.add(line); };
  bool killed = false;
  std::thread killer([&] {
    if (!lines.wait_for("step     10/", 120)) return;
    kill(one->pid, SIGKILL);
    killed = true;
  });
  auto run = (*client)->submit_text(read_text(root() + "/samples/mlp/mlp_pipeline.json"), "mlp_pipeline.json", options);
  killer.join();
  REQUIRE(run.ok());
  INFO(lines.all());
  REQUIRE(killed);
  CHECK_FALSE(run->status.ok());
  CHECK(run->status.message().find("node 1 (127.0.0.2:19892) lost") != std::string::npos);
  CHECK(lines.has("cannot go on without the lost node"));
  CHECK(lines.has("does not hold every variable whole"));
  (void)(*client)->shutdown();
  CHECK(master.wait(15) == 0);
}
