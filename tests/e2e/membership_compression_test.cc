// Live membership with compressed gradients (train.compression): what a
// compressed all-reduce carries from step to step (each node's error, and
// PowerSGD's Q, the same on every node) goes on through a lost node and a
// node that comes back, as the variables do. The survivors go on from the
// error and Q they held after the step they start from; a node that comes
// back starts with no error (it has sent nothing) and node 0's Q.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "membership_util.h"
#include "process_util.h"

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cluster/client.h"

namespace {

using rill::testing::read_text;
using rill::testing::root;
using namespace rill::testing::membership;

// The checkpoint of `step` under `dir` with each carried error [nodes, n]
// made [rows, n]: its first `rows` rows, then rows of zeros. What a
// checkpoint of the plan's nodes would hold had node k's error been row k
// (the survivors' own, in order) and a node that comes back none.
void carried_rows(const std::filesystem::path& dir, int64_t step, int64_t rows) {
  const std::filesystem::path at = dir / rill::checkpoint_step_name(step);
  auto c = rill::read_checkpoint(at.string());
  REQUIRE(c.ok());
  int cut = 0;
  for (rill::CheckpointTensor& t : c->tensors) {
    if (!t.name.starts_with("compression/") || !t.name.ends_with("_error")) continue;
    REQUIRE(t.shape.size() == 2);
    t.values.resize(static_cast<size_t>(rows * t.shape[1]), 0.0f);
    t.shape[0] = rows;
    ++cut;
  }
  REQUIRE(cut > 0);
  std::filesystem::remove_all(at);
  REQUIRE(rill::write_checkpoint(dir.string(), *c, 3).ok());
}

}  // namespace

// Why bit for bit: each stretch of the live run starts from the variables,
// optimizer state, error and Q a run of the same stretches through
// checkpoints starts from, whose errors are cut to the survivors' rows
// (3 -> 2) and given a zero row for the node back (2 -> 3); from there both
// are a plan of that many nodes of the same job, the same kernels on this
// machine and the same fixed-order sums over the same batches. Without the
// carried state the live run's survivors would start from zero error and a
// fresh Q, and the models would differ.
TEST_CASE("a compressed job's carried error and Q go on through a lost node and its return: 3 -> 2 -> 3 nodes") {
  for (const char* kind : {"powersgd", "bf16"}) {
    const std::string compression = kind;
    CAPTURE(compression);
    const auto dir = fresh_dir("compressed_" + compression);
    Cluster cluster(dir, "e", 3, 19840);
    REQUIRE(cluster.client);
    const std::string job = read_text(root() + "/samples/mlp/mlp.json");
    constexpr int64_t kSteps = 160;
    const auto with_compression = [&](rill::SubmitOptions o) {
      for (const char* set : {"train.compression_rank=2", "train.compression_start_step=10"})
        o.overrides.push_back(set);
      o.overrides.push_back("train.compression=" + compression);
      return o;
    };
    rill::SubmitOptions options = with_compression(options_for(dir / "live", kSteps));
    options.min_nodes = 2;
    Lines lines;
    options.on_line = [&](const std::string& line) { lines.add(line); };
    bool killed = false, back = false;
    std::thread killer([&] {
      if (!lines.wait_for("step     30/", 120)) return;
      kill(cluster[2].pid, SIGKILL);
      cluster[2].wait(10);
      killed = true;
      if (!lines.wait_for("going on from step", 60) || !lines.wait_for("step     45/", 60)) return;
      cluster.restart(2);
      back = true;
    });
    auto live = cluster.client->submit_text(job, "mlp.json", options);
    killer.join();
    REQUIRE(live.ok());
    INFO(lines.all());
    INFO(live->result_json);
    REQUIRE(killed);
    REQUIRE(back);
    REQUIRE(live->status.ok());
    auto result = nlohmann::json::parse(live->result_json);
    REQUIRE(result["restarts"].size() == 2);
    REQUIRE(result["restarts"][0]["from"] == "memory");
    REQUIRE(result["restarts"][1]["from"] == "memory");
    const int64_t shrunk = result["restarts"][0]["resumed_from_step"].get<int64_t>();
    const int64_t grown = result["restarts"][1]["resumed_from_step"].get<int64_t>();
    REQUIRE(shrunk < grown);
    REQUIRE(grown < kSteps);

    const std::filesystem::path reference = dir / "reference";
    auto first = cluster.client->submit_text(job, "mlp.json", with_compression(options_for(reference, shrunk)));
    REQUIRE(first.ok());
    INFO(first->result_json);
    REQUIRE(first->status.ok());
    carried_rows(reference, shrunk, 2);
    Cluster pair(dir, "f", 2, 19844);
    REQUIRE(pair.client);
    rill::SubmitOptions middle = with_compression(options_for(reference, grown));
    middle.resume = "latest";
    auto second = pair.client->submit_text(job, "mlp.json", middle);
    REQUIRE(second.ok());
    INFO(second->result_json);
    REQUIRE(second->status.ok());
    carried_rows(reference, grown, 3);
    rill::SubmitOptions last = with_compression(options_for(reference, kSteps));
    last.resume = "latest";
    auto third = cluster.client->submit_text(job, "mlp.json", last);
    REQUIRE(third.ok());
    INFO(third->result_json);
    REQUIRE(third->status.ok());
    CHECK(!model_bytes(dir / "live", kSteps).empty());
    CHECK(model_bytes(dir / "live", kSteps) == model_bytes(reference, kSteps));
    CHECK(cluster.shut_down() == 0);
    CHECK(pair.shut_down() == 0);
  }
}
