#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>

#include "graph/job_file.h"
#include "samples/linear_regression/linear_regression_job.h"
#include "samples/mlp/mlp_job.h"
#include "tests/graph/job_text.h"
#include "tests/graph/test_paths.h"

namespace rill::graph {
namespace {

using testing::source_path;

// A minimal good job, as text, for tests that change one thing.
const char* kSmallJob = R"({
  "name": "small",
  "datasets": [{"name": "d", "kind": "synthetic", "num_samples": 64, "feature_shape": [4], "num_classes": 3}],
  "inputs": [
    {"name": "x", "dataset": "d", "field": "features", "shape": [4]},
    {"name": "y", "dataset": "d", "field": "label", "dtype": "i32"}
  ],
  "variables": [{"name": "w", "shape": [4, 3], "init": {"type": "uniform", "low": -0.5, "high": 0.5, "seed": 7}}],
  "ops": [
    {"name": "logits", "type": "matmul", "inputs": ["x", "w"]},
    {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
    {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}
  ],
  "loss": "loss",
  "train": {"steps": 10, "batch_size": 8}
})";

using testing::edit;

}  // namespace

TEST_CASE("the sample job files load and equal the jobs their C++ forms build") {
  auto mlp = load_job_file(source_path("samples/mlp/mlp.json"));
  REQUIRE_MESSAGE(mlp.ok(), mlp.status().to_string());
  CHECK(*mlp == samples::make_mlp_job());

  auto linear = load_job_file(source_path("samples/linear_regression/linear_regression.json"));
  REQUIRE_MESSAGE(linear.ok(), linear.status().to_string());
  CHECK(*linear == samples::make_linear_regression_job());
}

TEST_CASE("the MLP job file reads every section as written") {
  auto loaded = load_job_file(source_path("samples/mlp/mlp.json"));
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  const Job& job = *loaded;
  CHECK(job.name == "mlp");
  REQUIRE(job.datasets.size() == 2);
  CHECK(job.datasets[1].kind == "idx");
  CHECK(job.datasets[1].labels == "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  CHECK(job.datasets[0].scale == 1.0f / 255.0f);
  REQUIRE(job.inputs.size() == 2);
  CHECK(job.inputs[1].dtype == DType::kI32);
  CHECK(job.inputs[1].shape.empty());
  CHECK_FALSE(job.inputs[0].sbp.has_value());
  REQUIRE(job.variables.size() == 6);
  CHECK(job.variables[0].init.type == "xavier_uniform");
  CHECK(job.variables[0].init.attrs == Attrs{{"seed", int64_t{1}}});
  CHECK(job.variables[1].init.attrs == Attrs{{"value", 0.0}});
  REQUIRE(job.ops.size() == 11);
  CHECK(job.ops[0].outputs == std::vector<std::string>{"fc1"});  // outputs default to the op's name
  CHECK(job.ops[9].attrs.values().empty());
  CHECK(job.loss == "loss");
  CHECK(job.metrics == std::vector<Metric>{{"accuracy", "acc"}});
  CHECK(job.optimizer.type == "momentum");
  CHECK(job.optimizer.lr == doctest::Approx(0.03));
  CHECK(job.train.epochs == 2);
  CHECK(job.train.steps == 0);
  CHECK(job.train.batch_size == 256);
  CHECK(job.train.seed == 1);
  CHECK(job.train.shuffle);           // default
  CHECK(job.train.devices == "cpu:1");  // default
  REQUIRE(job.eval.has_value());
  CHECK(job.eval->dataset == "test");
  CHECK(job.eval->batch_size == 500);
}

TEST_CASE("the linear regression job file reads its inline data") {
  auto loaded = load_job_file(source_path("samples/linear_regression/linear_regression.json"));
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  const Dataset& d = loaded->datasets.at(0);
  REQUIRE(d.tensors.size() == 2);
  CHECK(d.tensors[0].shape == Shape{4, 2});
  CHECK(d.tensors[0].f32 == std::vector<float>{1, 2, 2, 3, 4, 6, 3, 1});
  CHECK(d.tensors[1].f32 == std::vector<float>{8, 13, 26, 9});
  CHECK_FALSE(loaded->train.shuffle);
  CHECK(loaded->ops[1].attrs == Attrs{{"reduction", std::string("sum")}});
  CHECK_FALSE(loaded->eval.has_value());
}

TEST_CASE("attributes keep their types: bools and ints as int64, floats as double, lists, strings") {
  std::string text = kSmallJob;
  text = edit(text, R"("inputs": ["x", "w"]})",
              R"("inputs": ["x", "w"], "attrs": {"transpose_a": false, "transpose_b": false}})");
  text = edit(text, R"("inputs": ["xent"]})", R"("inputs": ["xent"], "attrs": {"axes": [0], "keepdims": false}})");
  auto job = parse_job_json(text, "small.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->ops[0].attrs == Attrs{{"transpose_a", int64_t{0}}, {"transpose_b", int64_t{0}}});
  CHECK(job->ops[2].attrs == Attrs{{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{0}}});
  CHECK(job->variables[0].init.attrs == Attrs{{"low", -0.5}, {"high", 0.5}, {"seed", int64_t{7}}});
}

TEST_CASE("job files accept comments, unquoted keys and SBP hints") {
  std::string text = kSmallJob;
  text.insert(text.find("\"ops\""), "// the model\n  ");
  text = edit(text, R"("name": "w", )", R"x(name: "w", sbp: "S(1)", )x");
  text = edit(text, R"("inputs": ["x", "w"]})", R"x("inputs": ["x", "w"], "sbp": ["S(1)"]})x");
  auto job = parse_job_json(text, "small.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->variables[0].sbp == Sbp::split(1));
  REQUIRE(job->ops[0].output_sbp.size() == 1);
  CHECK(job->ops[0].output_sbp[0] == Sbp::split(1));
}

TEST_CASE("schema errors carry the file name and line") {
  std::string text = kSmallJob;
  text = edit(text, "\"batch_size\": 8", "\"batch_sise\": 8");
  auto job = parse_job_json(text, "small.json");
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().message().find("small.json:15: unknown field: batch_sise") != std::string::npos);
  CHECK(job.status().message().find("\"batch_sise\": 8") != std::string::npos);  // the line is quoted
}

TEST_CASE("check errors carry the line of the element at fault") {
  std::string text = kSmallJob;
  text = edit(text, R"(["logits", "y"])", R"(["logit", "y"])");
  auto job = parse_job_json(text, "small.json");
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().message() ==
        "small.json:11: ops[1] (xent): input 'logit' is not defined (did you mean 'logits'?) "
        "(known: x, y, w, logits)");
}

TEST_CASE("several independent errors are all reported, one per line") {
  std::string text = kSmallJob;
  text = edit(text, "\"uniform\"", "\"uniformm\"");
  text = edit(text, "\"steps\": 10", "\"steps\": 0");
  auto job = parse_job_json(text, "small.json");
  REQUIRE_FALSE(job.ok());
  const std::string& m = job.status().message();
  CHECK(m.find("small.json:8: variables[0] (w): unknown initializer 'uniformm' (did you mean 'uniform'?)") !=
        std::string::npos);
  CHECK(m.find("small.json:15: train: steps and epochs are both 0") != std::string::npos);
  CHECK(std::count(m.begin(), m.end(), '\n') == 1);
}

TEST_CASE("modes are words checked where they are read, in the file and by --set, naming the line and the choices") {
  const std::pair<const char*, const char*> cases[] = {
      {R"("train": {"steps": 10, "batch_size": 8, "schedule": "interleaved"})",
       "small.json:15: train.schedule must be \"1f1b\" or \"gpipe\", got \"interleaved\""},
      {R"("train": {"steps": 10, "batch_size": 8, "view": "local"})",
       "small.json:15: train.view must be \"consistent\" or \"mirrored\", got \"local\""},
      {R"("train": {"steps": 10, "batch_size": 8}, "distributed": {"mode": "ring"})",
       "small.json:15: distributed.mode must be \"pserver\", \"collective\" or \"nccl2\", got \"ring\""},
      {R"("train": {"steps": 10, "batch_size": 8}, "distributed": {"pservers": "0", "split_method": "Random"})",
       "small.json:15: distributed.split_method must be \"RoundRobin\" or \"HashName\", got \"Random\""},
  };
  for (const auto& [train, error] : cases) {
    CAPTURE(train);
    auto job = parse_job_json(edit(kSmallJob, R"("train": {"steps": 10, "batch_size": 8})", train), "small.json");
    REQUIRE_FALSE(job.ok());
    CHECK(job.status().message().find(error) != std::string::npos);
  }
  auto job = parse_job_json(kSmallJob, "small.json",
                            {"train.schedule=gpipe", "train.view=mirrored", "distributed.mode=nccl2"});
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->train.schedule == Schedule::kGpipe);
  CHECK(job->mirrored());
  CHECK(job->distributed->mode == DistMode::kNccl2);
  CHECK_FALSE(job->pserver_mode());
  Job mlp = samples::make_mlp_job();
  CHECK(apply_override(&mlp, "train.schedule=interleaved").message() ==
        "train.schedule: 'interleaved' is not one of \"1f1b\" or \"gpipe\"");
  CHECK(apply_override(&mlp, "distributed.split_method=Random").message().find("\"RoundRobin\" or \"HashName\"") !=
        std::string::npos);
  CHECK(mlp.train.schedule == Schedule::k1f1b);  // failed overrides change nothing
}

TEST_CASE("load_job_file names a missing file") {
  auto job = load_job_file("/nonexistent/job.json");
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().code() == Code::kNotFound);
  CHECK(job.status().message().find("/nonexistent/job.json") != std::string::npos);
  CHECK_FALSE(check_job_file("/nonexistent/job.json").ok());
  CHECK(check_job_file(source_path("samples/mlp/mlp.json")).ok());
}

TEST_CASE("overrides change the job before it is checked") {
  Job job = samples::make_mlp_job();
  REQUIRE(apply_override(&job, "train.steps=20").ok());
  REQUIRE(apply_override(&job, "train.epochs=0").ok());
  REQUIRE(apply_override(&job, "train.batch_size=64").ok());
  REQUIRE(apply_override(&job, "train.log_every=5").ok());
  REQUIRE(apply_override(&job, "train.seed=9").ok());
  REQUIRE(apply_override(&job, "train.devices=cpu:4").ok());
  REQUIRE(apply_override(&job, "train.shuffle=false").ok());
  REQUIRE(apply_override(&job, "optimizer.type=adam").ok());
  REQUIRE(apply_override(&job, "optimizer.lr=0.001").ok());
  REQUIRE(apply_override(&job, "eval.batch_size=1000").ok());
  REQUIRE(apply_override(&job, "datasets.test.images=/data/images.gz").ok());
  CHECK(job.train.steps == 20);
  CHECK(job.train.epochs == 0);
  CHECK(job.train.batch_size == 64);
  CHECK(job.train.log_every == 5);
  CHECK(job.train.seed == 9);
  CHECK(job.train.devices == "cpu:4");
  CHECK_FALSE(job.train.shuffle);
  CHECK(job.optimizer.type == "adam");
  CHECK(job.optimizer.lr == 0.001);
  CHECK(job.eval->batch_size == 1000);
  CHECK(job.datasets[1].images == "/data/images.gz");

  Status unknown = apply_override(&job, "train.stpes=3");
  CHECK(unknown.message().find("unknown setting 'train.stpes' (did you mean 'train.steps'?)") != std::string::npos);
  CHECK(apply_override(&job, "train.steps").message().find("expected section.field=value") != std::string::npos);
  CHECK(apply_override(&job, "train.steps=ten").message().find("'ten' is not an integer") != std::string::npos);
  CHECK(apply_override(&job, "optimizer.lr=fast").message().find("'fast' is not a finite number") !=
        std::string::npos);
  CHECK_FALSE(apply_override(&job, "train.seed=-1").ok());
  CHECK_FALSE(apply_override(&job, "datasets.nope.images=x").ok());
  CHECK(job.train.steps == 20);  // failed overrides change nothing

  Job no_eval = samples::make_linear_regression_job();
  CHECK(apply_override(&no_eval, "eval.batch_size=4").message().find("no eval section") != std::string::npos);
}

// A short run leaves out the eval pass and the generated text from the
// command line; generate's fields are set where the job has the section.
TEST_CASE("overrides turn the eval pass and generation off, and set generate's fields") {
  auto gpt = load_job_file(source_path("samples/gpt/gpt_moby.json"));
  REQUIRE_MESSAGE(gpt.ok(), gpt.status().to_string());
  Job job = *gpt;
  REQUIRE(job.eval);
  REQUIRE(job.generate);
  REQUIRE(apply_override(&job, "generate.prompt=Ahab").ok());
  REQUIRE(apply_override(&job, "generate.tokens=50").ok());
  REQUIRE(apply_override(&job, "generate.temperature=0").ok());
  REQUIRE(apply_override(&job, "generate.top_k=5").ok());
  REQUIRE(apply_override(&job, "generate.seed=7").ok());
  CHECK(job.generate->prompt == "Ahab");
  CHECK(job.generate->tokens == 50);
  CHECK(job.generate->temperature == 0);
  CHECK(job.generate->top_k == 5);
  CHECK(job.generate->seed == 7);
  CHECK(apply_override(&job, "eval=no").message().find("only eval=off") != std::string::npos);
  CHECK(job.eval);
  REQUIRE(apply_override(&job, "eval=off").ok());
  CHECK_FALSE(job.eval);
  REQUIRE(apply_override(&job, "generate.tokens=0").ok());
  CHECK_FALSE(job.generate);
  CHECK(apply_override(&job, "generate.tokens=10").message().find("no generate section") != std::string::npos);
  Job other = *gpt;
  REQUIRE(apply_override(&other, "generate=off").ok());
  CHECK_FALSE(other.generate);
  // The loader checks the job as left: without eval and generate it is whole.
  auto shorter = load_job_file(source_path("samples/gpt/gpt_moby.json"), {"eval=off", "generate=off"});
  REQUIRE_MESSAGE(shorter.ok(), shorter.status().to_string());
  CHECK_FALSE(shorter->eval);
  CHECK_FALSE(shorter->generate);
}

TEST_CASE("overrides given to the loader apply before the check") {
  std::string text = kSmallJob;
  text = edit(text, "\"steps\": 10", "\"steps\": 0");
  CHECK_FALSE(parse_job_json(text, "small.json").ok());
  auto job = parse_job_json(text, "small.json", {"train.steps=5", "optimizer.lr=0.5"});
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->train.steps == 5);
  CHECK(job->optimizer.lr == 0.5);
  auto bad = parse_job_json(kSmallJob, "small.json", {"train.batch_size=-1"});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("small.json (--set train.batch_size=-1): train.batch_size must be > 0, got -1") != std::string::npos);
}

}  // namespace rill::graph

namespace rill::graph {

TEST_CASE("the example in docs/JOB_FORMAT.md is the MLP sample") {
  std::ifstream in(testing::source_path("docs/JOB_FORMAT.md"));
  REQUIRE(in.good());
  std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t start = doc.find("```json\n");
  REQUIRE(start != std::string::npos);
  start += std::string("```json\n").size();
  size_t end = doc.find("```", start);
  REQUIRE(end != std::string::npos);
  auto job = parse_job_json(doc.substr(start, end - start), "JOB_FORMAT.md");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(*job == samples::make_mlp_job());
}

}  // namespace rill::graph

namespace rill::graph {
namespace {

// Every key `--set` takes is in docs/JOB_FORMAT.md's Overrides section, and
// every key listed there is taken: the doc's list is the CLI's.
TEST_CASE("the documented --set keys are exactly the ones the CLI takes") {
  std::ifstream in(testing::source_path("docs/JOB_FORMAT.md"));
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t from = doc.find("## Overrides");
  REQUIRE(from != std::string::npos);
  const std::string section = doc.substr(from, doc.find("\n## ", from + 1) - from);
  // `a.b`, `a.{b,c}` (each), and the datasets entry as one key.
  std::set<std::string> documented;
  for (size_t open = section.find('`'); open != std::string::npos; open = section.find('`', open + 1)) {
    const size_t close = section.find('`', open + 1);
    REQUIRE(close != std::string::npos);
    const std::string token = section.substr(open + 1, close - open - 1);
    open = close;
    if (token.find(' ') != std::string::npos || token.find('=') != std::string::npos) continue;  // prose, commands
    const size_t brace = token.find('{');
    if (brace == std::string::npos || token.find("NAME") != std::string::npos) {
      documented.insert(token);
      continue;
    }
    const std::string prefix = token.substr(0, brace);
    std::string field;
    for (char c : token.substr(brace + 1)) {
      if (c == ',' || c == '}') {
        documented.insert(prefix + field);
        field.clear();
      } else {
        field += c;
      }
    }
  }
  const std::vector<std::string> keys = override_keys();
  const std::set<std::string> taken(keys.begin(), keys.end());
  for (const std::string& key : taken) {
    CAPTURE(key);
    CHECK(documented.count(key) == 1);
  }
  for (const std::string& key : documented) {
    CAPTURE(key);
    CHECK(taken.count(key) == 1);
  }
}

}  // namespace
}  // namespace rill::graph
