// Ops that stand for several, and blocks in files of their own: `linear`
// becomes the matmul and bias_add the long form writes (graph/job_linear.h);
// a block's `include` takes its fields from another file
// (graph/job_file.h resolve_includes). The GPT sample written with both
// expands to the long form's ops.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

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

TEST_CASE("the GPT sample's short form expands to the long form's ops, one for one") {
  auto long_form = load_job_file(testing::source_path("samples/gpt/gpt_moby.json"));
  auto short_form = load_job_file(testing::source_path("samples/gpt/gpt_moby_short.json"));
  REQUIRE_MESSAGE(long_form.ok(), long_form.status().to_string());
  REQUIRE_MESSAGE(short_form.ok(), short_form.status().to_string());
  REQUIRE(short_form->ops.size() == long_form->ops.size());
  for (size_t k = 0; k < long_form->ops.size(); ++k) {
    CAPTURE(long_form->ops[k].name);
    CHECK(short_form->ops[k].type == long_form->ops[k].type);
    CHECK(short_form->ops[k].attrs == long_form->ops[k].attrs);
  }
  CHECK(short_form->variables == long_form->variables);
}

}  // namespace rill::graph
