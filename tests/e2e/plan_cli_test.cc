// `rill plan`: its summary (the default output), the whole plan as JSON,
// the statistics (--stats) and the DOT drawings (a box per op or layer,
// --dot-tasks a box per task).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "process_util.h"

namespace {

using rill::testing::Ran;
using rill::testing::root;
using rill::testing::run_rill;
std::filesystem::path temp_dir() { return ::rill::testing::temp_dir("rill-plan-"); }

}  // namespace

// By default rill plan sums the plan up for a reader: its nodes and devices,
// a step's shape, tasks by kind, datasets, each node's memory by zone.
TEST_CASE("rill plan prints a readable summary by default") {
  Ran ran = run_rill("plan " + root() + "/samples/mlp/mlp_stages.json --nodes 2");
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  CHECK(ran.output.find("job 'mlp_stages' on 2 node(s) x 2 device(s) (cpu 0-1:0-1)") != std::string::npos);
  CHECK(ran.output.find("a step: global batch 256, 2 stage(s), 1 micro-batch(es); 468 steps") != std::string::npos);
  CHECK(ran.output.find(" Boxing, ") != std::string::npos);
  CHECK(ran.output.find("reads dataset 'train' (idx ") != std::string::npos);
  CHECK(ran.output.find("  node 0 host ") != std::string::npos);
  CHECK(ran.output.find("  node 1 host ") != std::string::npos);
  CHECK(ran.output.find("the whole plan: --json") != std::string::npos);
  CHECK(ran.output.find("\"tasks\"") == std::string::npos);  // not the JSON
  // Drawn, a box per op, or per layer where ops are too many to lay out
  // (the GPT's 551 tasks): its h0 layer one box; --dot-tasks a box per task.
  for (const bool tasks : {false, true}) {
    CAPTURE(tasks);
    const auto dot = temp_dir() / (tasks ? "gpt_tasks.dot" : "gpt.dot");
    Ran drawn = run_rill("plan " + root() + "/samples/gpt/gpt_moby.json --dot " + dot.string() +
                         (tasks ? " --dot-tasks" : ""));
    REQUIRE(drawn.code == 0);
    const std::string text = rill::testing::read_text(dot.string());
    const std::regex box(R"(\n +[ot]\d+ \[label=)");
    const auto boxes = std::distance(std::sregex_iterator(text.begin(), text.end(), box), std::sregex_iterator());
    if (tasks) {
      CHECK(boxes == 551);
    } else {
      CHECK(boxes > 0);
      CHECK(boxes <= 120);
      CHECK(text.find("[label=\"h0\\n") != std::string::npos);
    }
  }
}

TEST_CASE("rill plan prints a JSON summary and writes DOT") {
  auto dot = temp_dir() / "plan.dot";
  Ran ran = run_rill("plan " + root() + "/samples/linear_regression/linear_regression.json --devices cpu:2 --json --dot " +
                 dot.string());
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  auto plan = nlohmann::json::parse(ran.output);
  CHECK(plan["tasks"].size() > 4);
  CHECK(plan["regsts"].size() > 4);
  std::ifstream in(dot);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("digraph") != std::string::npos);
  // Deterministic: the same job prints the same plan.
  Ran again = run_rill("plan " + root() + "/samples/linear_regression/linear_regression.json --devices cpu:2 --json");
  CHECK(again.output == ran.output);
}

// `--set train.compression_start_step` reaches the plan: the gradients'
// all-reduces across nodes say where compression begins; a negative start
// is refused naming the setting.
TEST_CASE("rill plan --set train.compression_start_step: the gradients' boxings say where compression begins") {
  const std::string job = "plan " + root() + "/samples/mlp/mlp.json --nodes 2 --json --set train.compression=powersgd";
  Ran ran = run_rill(job + " --set train.compression_start_step=40");
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  int compressed = 0;
  const nlohmann::json plan = nlohmann::json::parse(ran.output);
  for (const nlohmann::json& task : plan["tasks"]) {
    if (!task.contains("boxing") || !task["boxing"].contains("compress")) continue;
    CHECK(task["boxing"]["compress"] == "powersgd rank 8 from step 40");
    ++compressed;
  }
  CHECK(compressed > 0);
  Ran refused = run_rill(job + " --set train.compression_start_step=-1");
  CHECK(refused.code != 0);
  CHECK(refused.output.find("train.compression_start_step must be in [0, ") != std::string::npos);
}

TEST_CASE("rill plan --stats prints the compile time, the plan's size and its memory planning time, not the plan") {
  Ran ran = run_rill("plan " + root() + "/samples/mlp/mlp_stages.json --nodes 2 --stats");
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  CHECK(ran.output.rfind("compiled in ", 0) == 0);
  CHECK(ran.output.find(" tasks, ") != std::string::npos);
  CHECK(ran.output.find("3 placement(s) on 2 node(s) x 2") != std::string::npos);
  CHECK(ran.output.find("\nmemory of 2 node(s) planned and checked in ") != std::string::npos);
  CHECK(ran.output.find("\"tasks\"") == std::string::npos);
#ifdef RILL_WITH_CUDA
  // Planned anywhere, with or without a GPU: train.nccl's communicators.
  Ran nccl = run_rill("plan " + root() + "/samples/mlp/mlp.json --nodes 2 --devices cuda:2 --set train.nccl=true --set "
                      "train.bucket_bytes=0 --stats");
  INFO(nccl.output);
  REQUIRE(nccl.code == 0);
  CHECK(nccl.output.find("communicator 0 (nccl): 4 ranks, 6 all_reduce in one order, ") != std::string::npos);
  // How GPU regsts change memory zones: two stages on two GPUs of a node
  // exchange peer to peer; on two nodes through host memory.
  Ran stages = run_rill("plan " + root() + "/samples/gpt/gpt_moby.json --devices cuda:2 --set pipeline.num_stages=2 "
                        "--set train.micro_batches=2 --stats");
  INFO(stages.output);
  CHECK(stages.output.find("copies: 2 host to GPU, 1 GPU to host, 7 GPU to GPU (peer to peer); 0 regsts sent") !=
        std::string::npos);
  Ran nodes = run_rill("plan " + root() + "/samples/mlp/mlp_pipeline.json --nodes 2 --devices cuda:1 --stats");
  INFO(nodes.output);
  CHECK(nodes.output.find("0 GPU to GPU (peer to peer); 4 regsts sent to another node through host memory") !=
        std::string::npos);
#endif
}

// The GPT sample written short (its block in samples/gpt/gpt_block.json,
// `linear` for each matmul and bias_add) is the long form for the plan: the
// same kernels on the same devices, and so the same losses bit for bit, on
// two devices.
TEST_CASE("the GPT sample's short form plans the long form's kernels and trains to its losses bit for bit") {
  auto kernels = [](const std::string& job) {
    Ran plan = run_rill("plan " + root() + "/samples/gpt/" + job + " --devices cpu:2 --json");
    REQUIRE_MESSAGE(plan.code == 0, plan.output);
    const auto j = nlohmann::json::parse(plan.output.substr(plan.output.find('{')));
    // Each task's kind, kernel (op type) and devices: names differ, nothing else.
    std::multiset<std::string> tasks;
    for (const auto& t : j["tasks"])
      tasks.insert(t["kind"].dump() + " " + t["op"].dump() + " " + t["placement"].dump());
    return std::make_pair(j["num_tasks"].get<int64_t>(), tasks);
  };
  CHECK(kernels("gpt_moby_short.json") == kernels("gpt_moby.json"));
  const auto dir = rill::testing::temp_dir("rill-short-");
  std::filesystem::create_directories(dir);
  std::string curves[2];
  int k = 0;
  for (const std::string job : {"gpt_moby.json", "gpt_moby_short.json"}) {
    const std::string result = (dir / (job + ".result")).string();
    // From the tree's root, where the sample's data/moby-dick.txt is.
    Ran ran = rill::testing::run_shell("cd " + root() + " && " + rill::testing::binary() + " run samples/gpt/" + job +
                                       " --devices cpu:2 --steps 10 --set eval=off --set generate=off --result " +
                                       result);
    REQUIRE_MESSAGE(ran.code == 0, ran.output);
    std::ifstream in(result);
    curves[k++] = nlohmann::json::parse(in)["loss_curve"].dump();
  }
  CHECK(curves[0] == curves[1]);
}

// Context parallelism's attention, first part: the GPT sample with every
// layer's scores split by their query rows over 2 devices (an S(2) hint on
// the scores) runs its causal softmax on pieces of the sequence, each
// reading where its rows start (kernels/ops/softmax.cc), and trains as one
// device does: only the order of float sums differs, the 1e-5 bound of the
// dense layouts over 10 steps (tests/e2e/cluster_test.cc). The rest of the
// layer stays data parallel here: a whole sequence split is not yet laid
// out.
TEST_CASE("the GPT sample with its attention scores split along the sequence trains as on one device") {
  std::ifstream in(root() + "/samples/gpt/gpt_moby.json");
  auto job = nlohmann::json::parse(in);
  int hinted = 0;
  for (auto& op : job["blocks"][0]["ops"])
    if (op["name"] == "h{i}.scores") {
      op["sbp"] = {"S(2)"};
      ++hinted;
    }
  REQUIRE(hinted == 1);
  const auto dir = rill::testing::temp_dir("rill-context-");
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "gpt_context.json").string();
  std::ofstream(file) << job.dump(1);
  Ran plan = run_rill("plan " + file + " --devices cpu:2 --json");
  REQUIRE_MESSAGE(plan.code == 0, plan.output);
  const auto p = nlohmann::json::parse(plan.output.substr(plan.output.find('{')));
  // The batch-split queries cut into pieces of the sequence (an all-to-all),
  // the keys gathered whole for every device's rows of the scores, and the
  // softmax's rows back to the batch split for the values' matmul.
  std::set<std::string> boxings;
  for (const auto& t : p["tasks"]) boxings.insert(t["name"].get<std::string>());
  CHECK(boxings.count("boxing:h0.q:S(0)->S(2)@0") == 1);
  CHECK(boxings.count("boxing:h0.k:S(0)->B") == 1);
  CHECK(boxings.count("boxing:h0.att:S(2)->S(0)@0") == 1);
  nlohmann::json curves[2];
  int k = 0;
  for (const char* devices : {"cpu:1", "cpu:2"}) {
    const std::string result = (dir / (std::string(devices).substr(4) + ".json")).string();
    Ran ran = rill::testing::run_shell("cd " + root() + " && " + rill::testing::binary() + " run " + file +
                                       " --devices " + devices + " --steps 10 --set eval=off --set generate=off" +
                                       " --result " + result);
    REQUIRE_MESSAGE(ran.code == 0, ran.output);
    std::ifstream r(result);
    curves[k++] = nlohmann::json::parse(r)["loss_curve"];
  }
  for (size_t i = 0; i < 10; ++i) {
    CAPTURE(i);
    const double want = curves[0][i].get<double>();
    CHECK(std::abs(curves[1][i].get<double>() - want) <= 1e-5 * std::abs(want));
  }
  std::filesystem::remove_all(dir);
}
