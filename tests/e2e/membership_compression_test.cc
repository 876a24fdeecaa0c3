// Live membership with compressed gradients (train.compression): what a
// compressed all-reduce carries from step to step (each node's error, and
// PowerSGD's Q, the same on every node) goes on through a lost node and a
// node that comes back, as the variables do. The survivors go on from the
// error and Q they held after the step they start from; a node that comes
// back starts with no error (it has sent nothing) and node 0's Q.
#include <doctest/doctest.h>


#include <filesystem>
#include <string>
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
    const auto run = submit_killing(cluster, job, "mlp.json", options, Kill{2, 30, nullptr, 45});
    auto& live = run->ran;
    REQUIRE(live.ok());
    INFO(run->lines.all());
    INFO(live->result_json);
    REQUIRE(run->killed);
    REQUIRE(run->back);
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
    run_stretch(cluster, job, "mlp.json", with_compression(options_for(reference, shrunk)), From::kStart);
    carried_rows(reference, shrunk, 2);
    Cluster pair(dir, "f", 2, 19844);
    REQUIRE(pair.client);
    run_stretch(pair, job, "mlp.json", with_compression(options_for(reference, grown)), From::kLatest);
    carried_rows(reference, grown, 3);
    run_stretch(cluster, job, "mlp.json", with_compression(options_for(reference, kSteps)), From::kLatest);
    CHECK(!model_bytes(dir / "live", kSteps).empty());
    CHECK(model_bytes(dir / "live", kSteps) == model_bytes(reference, kSteps));
    CHECK(cluster.shut_down() == 0);
    CHECK(pair.shut_down() == 0);
  }
}
