// Ops that stand for several, and blocks in files of their own: `linear`
// becomes the matmul and bias_add the long form writes, `attention` with
// `heads` the split into heads, the attention and the merge
// (graph/job_expand.h); a block's `include` takes its fields from another
// file (graph/job_file.h resolve_includes). The GPT sample written with
// them expands to the long form's ops.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "graph/job_file.h"
#include "tests/graph/job_text.h"
#include "tests/graph/test_paths.h"

namespace rill::graph {
namespace {

const char* kLinearJob = R"({
  "name": "lin",
  "datasets": [{"name": "d", "kind": "synthetic", "num_samples": 64, "feature_shape": [4], "num_classes": 3}],
  "inputs": [
    {"name": "x", "dataset": "d", "field": "features", "shape": [4]},
    {"name": "y", "dataset": "d", "field": "label", "dtype": "i32"}
  ],
  "variables": [{"name": "w", "shape": [4, 3]}, {"name": "b", "shape": [3]}, {"name": "v", "shape": [3, 3]}],
  "ops": [
    {"name": "z", "type": "linear", "inputs": ["x", "w", "b"]},
    {"name": "u", "type": "linear", "inputs": ["z", "v"], "attrs": {"transpose_b": true}},
    {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["u", "y"]},
    {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}
  ],
  "loss": "loss",
  "train": {"steps": 2, "batch_size": 8}
})";

using testing::edit;

}  // namespace

TEST_CASE("linear is a matmul and a bias_add in its place, or a matmul alone; its attrs are the matmul's") {
  auto job = parse_job_json(kLinearJob, "lin.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  REQUIRE(job->ops.size() == 5);
  CHECK(job->ops[0].name == "z.matmul");
  CHECK(job->ops[0].type == "matmul");
  CHECK(job->ops[0].inputs == std::vector<std::string>{"x", "w"});
  CHECK(job->ops[1].name == "z");
  CHECK(job->ops[1].type == "bias_add");
  CHECK(job->ops[1].inputs == std::vector<std::string>{"z.matmul", "b"});
  CHECK(job->ops[2].name == "u");
  CHECK(job->ops[2].type == "matmul");
  CHECK(job->ops[2].attrs.get_int("transpose_b") == 1);
  CHECK(job->ops[3].name == "xent");
}

TEST_CASE("a linear of the wrong arity, and an error after one, point at the line written") {
  auto one = parse_job_json(edit(kLinearJob, R"(["x", "w", "b"])", R"(["x"])"), "lin.json");
  REQUIRE_FALSE(one.ok());
  CHECK(one.status().message().find("lin.json:10: ops[0] (z): linear takes [x, w] or [x, w, b], got 1 input(s)") !=
        std::string::npos);
  // xent is ops[2] as written, ops[3] once z is two ops: the error names the line and entry written.
  auto after = parse_job_json(edit(kLinearJob, R"(["u", "y"])", R"(["u", "yy"])"), "lin.json");
  REQUIRE_FALSE(after.ok());
  INFO(after.status().message());
  CHECK(after.status().message().find("lin.json:12:") != std::string::npos);
  CHECK(after.status().message().find("ops[2]") != std::string::npos);
}

TEST_CASE("a block included from a file takes its fields; the entry's own fields win; errors name the file") {
  const auto dir = std::filesystem::temp_directory_path() / ("rill-include-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "blocks");
  std::ofstream(dir / "blocks" / "layer.json") << R"({
    "repeat": 7,
    "variables": [{"name": "l{i}.w", "shape": [4, 4]}, {"name": "l{i}.b", "shape": [4]}],
    "ops": [{"name": "l{i}.h", "type": "linear", "inputs": ["{input}", "l{i}.w", "l{i}.b"]}]
  })";
  const std::string job = R"({
  "name": "inc",
  "datasets": [{"name": "d", "kind": "synthetic", "num_samples": 64, "feature_shape": [4], "num_classes": 4}],
  "inputs": [
    {"name": "x", "dataset": "d", "field": "features", "shape": [4]},
    {"name": "y", "dataset": "d", "field": "label", "dtype": "i32"}
  ],
  "ops": [
    {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["top", "y"]},
    {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}
  ],
  "blocks": [{"name": "l", "include": "blocks/layer.json", "repeat": 2, "input": "x", "output": "l{i}.h", "as": "top"}],
  "loss": "loss",
  "train": {"steps": 2, "batch_size": 8}
})";
  std::ofstream(dir / "inc.json") << job;
  auto loaded = load_job_file((dir / "inc.json").string());
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  CHECK(loaded->variables.size() == 4);  // repeat 2, the entry's, not the file's 7
  CHECK(loaded->ops.size() == 2 * 2 + 2);
  // What `rill submit` sends: the text with the include resolved.
  std::ifstream in(dir / "inc.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto resolved = resolve_includes(text, (dir / "inc.json").string());
  REQUIRE(resolved.ok());
  CHECK(resolved->find("include") == std::string::npos);
  CHECK(parse_job_json(*resolved, "inc.json").ok());
  // Text that still names an include (what a master would get from a client
  // that did not resolve it) is refused: the master reads no file for it.
  auto unresolved = parse_job_json(text, "inc.json");
  REQUIRE_FALSE(unresolved.ok());
  CHECK(unresolved.status().message().find("include") != std::string::npos);
  // A missing file, and a file that is not a block's fields.
  std::ofstream(dir / "missing.json") << edit(job, "blocks/layer.json", "blocks/none.json");
  auto missing = load_job_file((dir / "missing.json").string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("blocks/none.json") != std::string::npos);
  CHECK(missing.status().message().find("blocks[0].include") != std::string::npos);
  std::ofstream(dir / "blocks" / "list.json") << "[1, 2]";
  std::ofstream(dir / "list.json") << edit(job, "blocks/layer.json", "blocks/list.json");
  auto list = load_job_file((dir / "list.json").string());
  REQUIRE_FALSE(list.ok());
  CHECK(list.status().message().find("not a JSON object of a block's fields") != std::string::npos);
  std::filesystem::remove_all(dir);
}

const char* kAttentionJob = R"({
  "name": "att",
  "datasets": [{"name": "d", "kind": "synthetic", "num_samples": 64, "feature_shape": [6, 8], "num_classes": 8}],
  "inputs": [
    {"name": "x", "dataset": "d", "field": "features", "shape": [6, 8]},
    {"name": "y", "dataset": "d", "field": "label", "dtype": "i32"}
  ],
  "ops": [
    {"name": "a", "type": "attention", "inputs": ["x", "x", "x"], "attrs": {"heads": 2, "causal": true}},
    {"name": "last", "type": "slice", "inputs": ["a"], "attrs": {"starts": [0, 5, 0], "ends": [8, 6, 8]}},
    {"name": "logits", "type": "reshape", "inputs": ["last"], "attrs": {"shape": [-1, 8]}},
    {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
    {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}
  ],
  "loss": "loss",
  "train": {"steps": 2, "batch_size": 8}
})";

TEST_CASE("attention with heads splits [B, T, C] into heads, attends, and merges them back") {
  auto job = parse_job_json(kAttentionJob, "att.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  std::vector<std::string> names, types;
  for (const Op& op : job->ops) {
    names.push_back(op.name);
    types.push_back(op.type);
  }
  CHECK(names == std::vector<std::string>{"a.q_split", "a.q", "a.k_split", "a.k", "a.v_split", "a.v", "a.heads",
                                          "a.merge", "a", "last", "logits", "xent", "loss"});
  CHECK(types[0] == "reshape");
  CHECK(job->ops[0].attrs.get_ints("shape") == std::vector<int64_t>{0, 0, 2, -1});
  CHECK(job->ops[1].attrs.get_ints("perm") == std::vector<int64_t>{0, 2, 1, 3});
  const Op& fused = job->ops[6];
  CHECK(fused.type == "attention");
  CHECK(fused.outputs == std::vector<std::string>{"a.heads", "a.lse"});
  CHECK(fused.attrs.get_int("causal") == 1);
  CHECK_FALSE(fused.attrs.has("heads"));
  CHECK(job->ops[8].attrs.get_ints("shape") == std::vector<int64_t>{0, 0, -1});

  // composed: matmul, softmax (with the scale given) and matmul in the fused op's place.
  auto composed = parse_job_json(edit(kAttentionJob, R"("causal": true)", R"("causal": true, "composed": true, "scale": 0.5)"),
                                 "att.json");
  REQUIRE_MESSAGE(composed.ok(), composed.status().to_string());
  CHECK(composed->ops[6].name == "a.scores");
  CHECK(composed->ops[6].attrs.get_int("transpose_b") == 1);
  CHECK(composed->ops[7].type == "softmax");
  CHECK(composed->ops[7].attrs.get_float("scale") == 0.5);
  CHECK(composed->ops[8].inputs == std::vector<std::string>{"a.probs", "a.v"});
}

TEST_CASE("attention with heads refuses what it cannot split, naming the line written") {
  auto message = [](const std::string& text) {
    auto job = parse_job_json(text, "att.json");
    REQUIRE_FALSE(job.ok());
    return job.status().message();
  };
  CHECK(message(edit(kAttentionJob, R"("heads": 2)", R"("heads": 0)")).find("att.json:9: ops[0] (a): attention's attr 'heads' must be an int >= 1") != std::string::npos);
  CHECK(message(edit(kAttentionJob, R"(["x", "x", "x"])", R"(["x", "x"])")).find("takes [q, k, v], got 2") != std::string::npos);
  CHECK(message(edit(kAttentionJob, R"("causal": true)", R"("composed": true)")).find("needs attr 'scale'") != std::string::npos);
  CHECK(message(edit(kAttentionJob, R"("causal": true)", R"("axis": 1)")).find("not 'axis'") != std::string::npos);
  // 3 heads do not divide C = 8: the reshape's error, at the attention's line.
  const std::string uneven = message(edit(kAttentionJob, R"("heads": 2)", R"("heads": 3)"));
  CHECK(uneven.find("att.json:9:") != std::string::npos);
  CHECK(uneven.find("a.q_split") != std::string::npos);
}

TEST_CASE("a group naming an op written short holds every op it became; composed needs heads") {
  std::string text = edit(kAttentionJob, R"("loss": "loss",)",
                          R"("groups": [{"name": "g", "placement": "cpu 0:0", "members": ["a", "x"]}],
  "loss": "loss",)");
  auto job = parse_job_json(text, "att.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  REQUIRE(job->groups.size() == 1);
  CHECK(job->groups[0].members == std::vector<std::string>{"a.q_split", "a.q", "a.k_split", "a.k", "a.v_split", "a.v",
                                                           "a.heads", "a.merge", "a", "x"});
  auto unheaded = parse_job_json(edit(kAttentionJob, R"("heads": 2, "causal": true)", R"("composed": true)"), "att.json");
  REQUIRE_FALSE(unheaded.ok());
  CHECK(unheaded.status().message().find("'composed' needs 'heads'") != std::string::npos);
}

// An op written short inside a block: its error names the block's entry
// and the layer, at the block's line.
TEST_CASE("an error in an op written short inside a block points at the block's entry and layer") {
  const std::string job = R"({
  "name": "blk",
  "datasets": [{"name": "d", "kind": "synthetic", "num_samples": 64, "feature_shape": [6, 8], "num_classes": 8}],
  "inputs": [
    {"name": "x", "dataset": "d", "field": "features", "shape": [6, 8]},
    {"name": "y", "dataset": "d", "field": "label", "dtype": "i32"}
  ],
  "ops": [
    {"name": "last", "type": "slice", "inputs": ["top"], "attrs": {"starts": [0, 5, 0], "ends": [8, 6, 8]}},
    {"name": "logits", "type": "reshape", "inputs": ["last"], "attrs": {"shape": [-1, 8]}},
    {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
    {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}
  ],
  "blocks": [{"name": "l", "repeat": 2, "input": "x", "output": "l{i}.a", "as": "top",
              "ops": [
                {"name": "l{i}.a", "type": "attention", "inputs": ["{input}", "{input}", "{input}"],
                 "attrs": {"heads": 0}}
              ]}],
  "loss": "loss",
  "train": {"steps": 2, "batch_size": 8}
})";
  auto loaded = parse_job_json(job, "blk.json");
  REQUIRE_FALSE(loaded.ok());
  const std::string message = loaded.status().message();
  INFO(message);
  CHECK(message.find("blk.json:16: blocks[0].ops[0] (l0.a): attention's attr 'heads' must be an int >= 1") !=
        std::string::npos);
  CHECK(message.find("(in layer 0 of block 'l')") != std::string::npos);
}

TEST_CASE("the GPT sample's short form expands to the long form's ops") {
  auto long_form = load_job_file(testing::source_path("samples/gpt/gpt_moby.json"));
  auto short_form = load_job_file(testing::source_path("samples/gpt/gpt_moby_short.json"));
  REQUIRE_MESSAGE(long_form.ok(), long_form.status().to_string());
  REQUIRE_MESSAGE(short_form.ok(), short_form.status().to_string());
  // The same ops with the same attributes, in another order within a
  // layer (the heads are split where the attention is written). A reshape
  // says the same shapes in two spellings: [-1, 128, 4, 32] written out,
  // [0, 0, 4, -1] by attention's heads; both resolve against the same
  // input (the plan test runs both, tests/e2e/plan_cli_test.cc).
  auto ops = [](const Job& job) {
    std::multiset<std::string> out;
    for (const Op& op : job.ops) {
      std::string attrs;
      if (op.type != "reshape")
        for (const auto& [name, value] : op.attrs.values())
          attrs += name + "=" + std::visit([](const auto& v) { return fmt::format("{}", v); }, value) + ";";
      out.insert(op.type + " " + attrs);
    }
    return out;
  };
  CHECK(ops(*short_form) == ops(*long_form));
  CHECK(short_form->variables == long_form->variables);
}

}  // namespace rill::graph

namespace rill::graph {
namespace {

// GPT-2 124M in the short form (samples/gpt2/gpt2_124m_bpe.json): llm.c's
// count of its parameters with the vocabulary padded to 50,304, and each
// layer's attention the fused op on 12 heads of 64.
TEST_CASE("the GPT-2 124M sample has GPT-2 124M's parameters and 12 heads of fused attention a layer") {
  auto job = load_job_file(testing::source_path("samples/gpt2/gpt2_124m_bpe.json"));
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  int64_t parameters = 0;
  for (const Variable& v : job->variables) {
    int64_t n = 1;
    for (int64_t d : v.shape) n *= d;
    parameters += n;
  }
  CHECK(parameters == 124475904);
  int fused = 0;
  for (const Op& op : job->ops)
    if (op.type == "attention") {
      ++fused;
      CHECK(op.inputs[0].ends_with(".y.q"));
    }
  CHECK(fused == 12);
  for (const Op& op : job->ops)
    if (op.name == "h0.y.q_split") CHECK(op.attrs.get_ints("shape") == std::vector<int64_t>{0, 0, 12, -1});
}

}  // namespace
}  // namespace rill::graph
