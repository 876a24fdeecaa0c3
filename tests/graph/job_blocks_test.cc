// Repeated blocks in job files: expansion into per-layer variables and ops in
// definition order, {i} and {input}, the last layer's `as` name, seeds per
// layer, the GPT sample's 4 layers; errors point into the block and name
// the layer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>

#include "graph/job_file.h"
#include "tests/graph/job_text.h"
#include "tests/graph/test_paths.h"

namespace rill::graph {
namespace {

// Three layers of h = relu(h W_i + b_i) between an input and a loss.
const char* kBlockJob = R"({
  "name": "deep",
  "datasets": [{"name": "d", "kind": "synthetic", "num_samples": 64, "feature_shape": [4], "num_classes": 4}],
  "inputs": [
    {"name": "x", "dataset": "d", "field": "features", "shape": [4]},
    {"name": "y", "dataset": "d", "field": "label", "dtype": "i32"}
  ],
  "ops": [
    {"name": "x2", "type": "scale", "inputs": ["x"], "attrs": {"scale": 2.0}},
    {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["top", "y"]},
    {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}
  ],
  "blocks": [{
    "name": "layer", "repeat": 3, "input": "x2", "output": "l{i}.h", "as": "top",
    "variables": [
      {"name": "l{i}.w", "shape": [4, 4], "init": {"type": "uniform", "low": -0.5, "high": 0.5, "seed": 7}},
      {"name": "l{i}.b", "shape": [4]}
    ],
    "ops": [
      {"name": "l{i}.mm", "type": "matmul", "inputs": ["{input}", "l{i}.w"]},
      {"name": "l{i}.z", "type": "bias_add", "inputs": ["l{i}.mm", "l{i}.b"]},
      {"name": "l{i}.h", "type": "relu", "inputs": ["l{i}.z"]}
    ]
  }],
  "loss": "loss",
  "train": {"steps": 10, "batch_size": 8}
})";

using testing::edit;

std::vector<std::string> op_names(const Job& job) {
  std::vector<std::string> names;
  for (const Op& op : job.ops) names.push_back(op.name);
  return names;
}

TEST_CASE("a block repeats its variables and ops per layer, each reading the layer before, in definition order") {
  auto job = parse_job_json(kBlockJob, "deep.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(op_names(*job) == std::vector<std::string>{"x2", "l0.mm", "l0.z", "l0.h", "l1.mm", "l1.z", "l1.h", "l2.mm",
                                                    "l2.z", "top", "xent", "loss"});
  CHECK(job->ops[1].inputs == std::vector<std::string>{"x2", "l0.w"});
  CHECK(job->ops[4].inputs == std::vector<std::string>{"l0.h", "l1.w"});
  CHECK(job->ops[9].inputs == std::vector<std::string>{"l2.z"});
  CHECK(job->ops[9].outputs == std::vector<std::string>{"top"});
  REQUIRE(job->variables.size() == 6);
  CHECK(job->variables[2].name == "l1.w");
  // Seeds advance by 1000 a layer, so layers start apart.
  CHECK(job->variables[0].init.attrs.get_int("seed") == 7);
  CHECK(job->variables[2].init.attrs.get_int("seed") == 1007);
  CHECK(job->variables[4].init.attrs.get_int("seed") == 2007);
  // Unwritten seeds advance too (from 0): layers never start alike.
  auto unseeded = parse_job_json(edit(kBlockJob, R"(, "seed": 7})", "}"), "deep.json");
  REQUIRE_MESSAGE(unseeded.ok(), unseeded.status().to_string());
  CHECK(unseeded->variables[2].init.attrs.get_int("seed", -1) == 1000);
  CHECK_FALSE(unseeded->variables[3].init.attrs.has("seed"));  // a fill has none
  // So does a written seed of an op that draws (dropout); an unwritten one
  // stays unwritten (the compiler draws it from the op's name, which
  // differs per layer); other ops get none.
  auto dropped = parse_job_json(edit(kBlockJob, R"({"name": "l{i}.h", "type": "relu", "inputs": ["l{i}.z"]})",
                                     R"({"name": "l{i}.r", "type": "relu", "inputs": ["l{i}.z"]},
                                        {"name": "l{i}.h", "type": "dropout", "inputs": ["l{i}.r"], "attrs": {"seed": 5}},
                                        {"name": "l{i}.u", "type": "dropout", "inputs": ["l{i}.r"]})"),
                                "deep.json");
  REQUIRE_MESSAGE(dropped.ok(), dropped.status().to_string());
  std::vector<int64_t> seeds;
  for (const Op& op : dropped->ops)
    if (op.type == "dropout") seeds.push_back(op.attrs.get_int("seed", -1));
    else CHECK_FALSE(op.attrs.has("seed"));
  CHECK(seeds == std::vector<int64_t>{5, -1, 1005, -1, 2005, -1});
  // Written back out, the job is its expanded form, and reads back the same.
  auto text = job_to_json(*job);
  REQUIRE(text.ok());
  auto again = parse_job_json(*text, "again.json");
  REQUIRE_MESSAGE(again.ok(), again.status().to_string());
  CHECK(*again == *job);
}

// "recompute" on a block: each layer's ops are one group, named by the
// block and the layer; the job writes them back op by op.
TEST_CASE("a block with recompute groups each layer's ops, and the job file written back keeps the groups") {
  auto job = parse_job_json(edit(kBlockJob, R"("as": "top",)", R"("as": "top", "recompute": true,)"), "re.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  for (const Op& op : job->ops) {
    CAPTURE(op.name);
    const bool in_block = (op.name[0] == 'l' && std::isdigit(static_cast<unsigned char>(op.name[1]))) || op.name == "top";
    CHECK(op.recompute == (!in_block ? "" : op.name == "top" ? "layer.2" : "layer." + op.name.substr(1, 1)));
  }
  auto text = job_to_json(*job);
  REQUIRE_MESSAGE(text.ok(), text.status().to_string());
  auto back = parse_job_json(*text, "written.json");
  REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  CHECK(back->ops == job->ops);
  // An op's own group, {i} expanded per layer, stays its own.
  auto own = parse_job_json(edit(edit(kBlockJob, R"("as": "top",)", R"("as": "top", "recompute": true,)"),
                                 R"("inputs": ["l{i}.mm", "l{i}.b"]})",
                                 R"("inputs": ["l{i}.mm", "l{i}.b"], "recompute": "bias{i}"})"),
                            "own.json");
  REQUIRE_MESSAGE(own.ok(), own.status().to_string());
  for (const Op& op : own->ops)
    if (op.name == "l1.z") CHECK(op.recompute == "bias1");
    else if (op.name == "l1.mm") CHECK(op.recompute == "layer.1");
}

TEST_CASE("one layer, or no 'as': the block's names are kept") {
  auto one = parse_job_json(edit(edit(kBlockJob, R"("repeat": 3)", R"("repeat": 1)"), R"("as": "top")",
                                 R"("as": "")"),
                            "one.json");
  CHECK_FALSE(one.ok());  // nothing makes 'top' now
  CHECK(one.status().message().find("'top'") != std::string::npos);
  auto named = parse_job_json(edit(edit(kBlockJob, R"("as": "top")", R"("as": "")"), R"(["top", "y"])",
                                   R"(["l2.h", "y"])"),
                              "named.json");
  REQUIRE_MESSAGE(named.ok(), named.status().to_string());
  CHECK(named->ops[9].name == "l2.h");
}

TEST_CASE("errors in a block point at the line in the block and name the layer") {
  auto bad_input = parse_job_json(edit(kBlockJob, R"("inputs": ["l{i}.mm", "l{i}.b"])", R"("inputs": ["l{i}.mx", "l{i}.b"])"),
                                  "deep.json");
  REQUIRE_FALSE(bad_input.ok());
  const std::string message = bad_input.status().message();
  INFO(message);
  // The line of the block's op (line 21 of kBlockJob), its entry in the block, and the layer.
  CHECK(message.find("deep.json:21:") != std::string::npos);
  CHECK(message.find("blocks[0].ops[1]") != std::string::npos);
  CHECK(message.find("(in layer 0 of block 'layer')") != std::string::npos);
  CHECK(message.find("'l0.mx'") != std::string::npos);
  // A name without {i} in a repeated block: every layer would define it.
  auto clash = parse_job_json(edit(kBlockJob, R"({"name": "l{i}.b", "shape": [4]})", R"({"name": "bias", "shape": [4]})"),
                              "deep.json");
  REQUIRE_FALSE(clash.ok());
  CHECK(clash.status().message().find("deep.json:17:") != std::string::npos);
  CHECK(clash.status().message().find("'bias' has no {i}: each of the 3 layers would define it") != std::string::npos);
  auto zero = parse_job_json(edit(kBlockJob, R"("repeat": 3)", R"("repeat": 0)"), "deep.json");
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.status().message().find("repeat 0 must be in [1, 10000]") != std::string::npos);
  // An op after a block keeps its own line.
  auto after = parse_job_json(edit(kBlockJob, R"(["xent"])", R"(["xent", "nothing"])"), "deep.json");
  REQUIRE_FALSE(after.ok());
  CHECK(after.status().message().find("deep.json:11:") != std::string::npos);
  CHECK(after.status().message().find("ops[2]") != std::string::npos);
}

TEST_CASE("the GPT sample's block makes 4 layers of 16 variables and 28 ops") {
  auto job = load_job_file(testing::source_path("samples/gpt/gpt_moby.json"));
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->variables.size() == 4 + 4 * 16);
  CHECK(job->ops.size() == 6 + 4 * 28);
  CHECK(std::count_if(job->ops.begin(), job->ops.end(), [](const Op& op) { return op.name == "hidden"; }) == 1);
  CHECK(std::any_of(job->variables.begin(), job->variables.end(),
                    [](const Variable& v) { return v.name == "h3.mlp.proj.w"; }));
}

TEST_CASE("the GPT sample refuses, before anything runs, a context past its position table and heads that cut the width") {
  std::ifstream file(testing::source_path("samples/gpt/gpt_moby.json"));
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(text.empty());
  // A window of 256 bytes over a [128, 128] position table.
  std::string longer = text;
  for (int k = 0; k < 2; ++k) longer = edit(longer, R"("context": 128)", R"("context": 256)");
  for (int k = 0; k < 2; ++k) longer = edit(longer, R"("shape": [128], "dtype")", R"("shape": [256], "dtype")");
  auto context = parse_job_json(longer, "gpt.json");
  REQUIRE_FALSE(context.ok());
  CHECK(context.status().message().find("ops[1] (x0): op 'bias_add': b [128, 128] must be [256, 128], the axes 1 to 2 of x "
                               "[16, 256, 128]") != std::string::npos);
  // 3 heads of 42 do not make 128 channels: named in layer 0 of the block.
  std::string heads = text;
  for (int k = 0; k < 3; ++k) heads = edit(heads, "[-1, 128, 4, 32]", "[-1, 128, 3, 42]");
  auto three = parse_job_json(heads, "gpt.json");
  REQUIRE_FALSE(three.ok());
  CHECK(three.status().message().find("blocks[0].ops[3] (h0.q2): op 'reshape': attr 'shape' = [-1, 128, 3, 42] "
                                      "cannot hold the 262144 elements of input shape [16, 128, 128] (in layer 0 of "
                                      "block 'h')") != std::string::npos);
}

}  // namespace
}  // namespace rill::graph
