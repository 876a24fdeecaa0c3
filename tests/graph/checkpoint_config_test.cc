// The job's checkpoint section: loading, defaults, job_to_json, overrides,
// the checker and JobBuilder. (Bad files: tests/jobs/bad/checkpoint_*.json.)
#include <doctest/doctest.h>

#include <algorithm>

#include "graph/job_builder.h"
#include "graph/job_check.h"
#include "graph/job_file.h"
#include "samples/linear_regression/linear_regression_job.h"
#include "samples/mlp/mlp_job.h"
#include "tests/graph/test_paths.h"

namespace rill::graph {
namespace {

// A good job; CHECKPOINT is replaced by a checkpoint section or by nothing.
const char* kJob = R"({
  "name": "ckpt",
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
  "train": {"steps": 10, "batch_size": 8}CHECKPOINT
})";

std::string job_text(const std::string& section) {
  std::string text = kJob;
  size_t at = text.find("CHECKPOINT");
  return text.replace(at, std::string("CHECKPOINT").size(), section.empty() ? "" : ",\n  " + section);
}

StatusOr<Job> parse(const std::string& section, const std::vector<std::string>& overrides = {}) {
  return parse_job_json(job_text(section), "ckpt.json", overrides);
}

Job small_job(CheckpointConfig checkpoint) {
  JobBuilder b("small");
  b.dataset({.name = "d", .kind = "synthetic", .num_samples = 64, .num_classes = 3, .feature_shape = {4}});
  TensorHandle x = b.input("x", "d", "features", {4});
  b.minimize(b.reduce_mean(x, {}, false, {.name = "loss"}), optim::sgd(0.1));
  b.train({.steps = 10, .batch_size = 8});
  b.checkpoint(std::move(checkpoint));
  return b.build();
}

// The messages of find_job_issues whose path starts with "checkpoint".
std::vector<std::string> checkpoint_issues(const Job& job) {
  std::vector<std::string> out;
  for (const JobIssue& issue : find_job_issues(job)) {
    CHECK_MESSAGE(issue.path.rfind("checkpoint", 0) == 0, issue.path << ": " << issue.message);
    out.push_back(issue.path + " | " + issue.message);
  }
  return out;
}

}  // namespace

TEST_CASE("the checkpoint section is read as written") {
  auto job = parse(R"("checkpoint": {"dir": "/runs/ckpt", "every": 250, "keep": 5, "overwrite": true})");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->checkpoint.dir == "/runs/ckpt");
  CHECK(job->checkpoint.every == 250);
  CHECK(job->checkpoint.keep == 5);
  CHECK(job->checkpoint == CheckpointConfig{"/runs/ckpt", 250, 5, true});
  // Written back out, it reads back the same.
  auto again = parse_job_json(*job_to_json(*job), "again.json");
  REQUIRE_MESSAGE(again.ok(), again.status().to_string());
  CHECK(again->checkpoint == job->checkpoint);
}

TEST_CASE("an absent checkpoint section or field keeps graph::Job's defaults") {
  CHECK(CheckpointConfig{} == CheckpointConfig{"", 0, 3, false});
  auto none = parse("");
  REQUIRE_MESSAGE(none.ok(), none.status().to_string());
  CHECK(none->checkpoint == CheckpointConfig{});
  auto empty = parse(R"("checkpoint": {})");
  REQUIRE_MESSAGE(empty.ok(), empty.status().to_string());
  CHECK(empty->checkpoint == CheckpointConfig{});
  auto dir_only = parse(R"("checkpoint": {"dir": "ckpt"})");
  REQUIRE_MESSAGE(dir_only.ok(), dir_only.status().to_string());
  CHECK(dir_only->checkpoint == CheckpointConfig{"ckpt", 0, 3});
  for (const char* sample : {"samples/mlp/mlp.json", "samples/linear_regression/linear_regression.json"}) {
    auto job = load_job_file(testing::source_path(sample));
    REQUIRE_MESSAGE(job.ok(), job.status().to_string());
    CHECK(job->checkpoint == CheckpointConfig{});
  }
}

TEST_CASE("job_to_json round-trips the checkpoint section and leaves out the default") {
  for (const CheckpointConfig& config : {CheckpointConfig{"/runs/\"q\" ckpt", 100, 7}, CheckpointConfig{"ckpt", 0, 3},
                                         CheckpointConfig{"", 0, 1}, CheckpointConfig{"d", int64_t{1} << 40, 1}}) {
    CAPTURE(config.dir);
    Job job = small_job(config);
    StatusOr<std::string> text = job_to_json(job);
    REQUIRE_MESSAGE(text.ok(), text.status().to_string());
    CHECK(text->find("\"checkpoint\": {") != std::string::npos);
    StatusOr<Job> back = parse_job_json(*text, "written.json");
    REQUIRE_MESSAGE(back.ok(), back.status().to_string() << "\n" << *text);
    CHECK(back->checkpoint == config);
    CHECK(*back == job);
    CHECK(*job_to_json(*back) == *text);
  }
  std::string written = *job_to_json(small_job({"/runs/ckpt", 100, 7}));
  CHECK(written.find("\"checkpoint\": {\"dir\": \"/runs/ckpt\", \"every\": 100, \"keep\": 7}") != std::string::npos);
  // A job that saves nothing is written as before the section existed.
  CHECK(job_to_json(small_job({}))->find("checkpoint") == std::string::npos);
  CHECK(job_to_json(samples::make_mlp_job())->find("checkpoint") == std::string::npos);
  CHECK(job_to_json(samples::make_linear_regression_job())->find("checkpoint") == std::string::npos);
}

TEST_CASE("checkpoint overrides") {
  Job job = samples::make_mlp_job();
  REQUIRE(apply_override(&job, "checkpoint.dir=/runs/mlp").ok());
  REQUIRE(apply_override(&job, "checkpoint.every=50").ok());
  REQUIRE(apply_override(&job, "checkpoint.keep=2").ok());
  CHECK(job.checkpoint == CheckpointConfig{"/runs/mlp", 50, 2});
  REQUIRE(apply_override(&job, "checkpoint.overwrite=true").ok());
  CHECK(job.checkpoint == CheckpointConfig{"/runs/mlp", 50, 2, true});
  CHECK(check_job(job).ok());

  CHECK(apply_override(&job, "checkpoint.every=often").message() == "checkpoint.every: 'often' is not an integer");
  CHECK(apply_override(&job, "checkpoint.keep=4294967296").message() ==
        "checkpoint.keep: '4294967296' is out of range");
  CHECK(apply_override(&job, "checkpoint.keep=1.5").message().find("not an integer") != std::string::npos);
  CHECK(apply_override(&job, "checkpoint.every=7.5").message().find("not an integer") != std::string::npos);
  CHECK(apply_override(&job, "train.steps=7x").message().find("not an integer") != std::string::npos);
  CHECK(job.train.steps == samples::make_mlp_job().train.steps);
  CHECK(apply_override(&job, "checkpoint.kep=1").message().find("(did you mean 'checkpoint.keep'?)") !=
        std::string::npos);
  CHECK(job.checkpoint == CheckpointConfig{"/runs/mlp", 50, 2, true});  // failed overrides change nothing
  REQUIRE(apply_override(&job, "checkpoint.dir=").ok());
  CHECK(job.checkpoint.dir.empty());

  std::vector<std::string> keys = override_keys();
  for (const char* key : {"checkpoint.dir", "checkpoint.every", "checkpoint.keep"})
    CHECK_MESSAGE(std::find(keys.begin(), keys.end(), key) != keys.end(), key);
}

TEST_CASE("checkpoint overrides given to the loader apply before the check") {
  auto bad = parse("", {"checkpoint.every=10"});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("ckpt.json (--set checkpoint.every=10): checkpoint.every is 10 but checkpoint.dir is empty") !=
        std::string::npos);
  auto good = parse("", {"checkpoint.every=10", "checkpoint.dir=/runs/x"});
  REQUIRE_MESSAGE(good.ok(), good.status().to_string());
  CHECK(good->checkpoint == CheckpointConfig{"/runs/x", 10, 3});
  auto repaired = parse(R"("checkpoint": {"every": 10, "keep": 0})", {"checkpoint.dir=d", "checkpoint.keep=1"});
  REQUIRE_MESSAGE(repaired.ok(), repaired.status().to_string());
  CHECK(repaired->checkpoint == CheckpointConfig{"d", 10, 1});
}

TEST_CASE("the checker bounds every and keep and requires a dir to save periodically") {
  CHECK(checkpoint_issues(small_job({})).empty());
  CHECK(checkpoint_issues(small_job({"ckpt", 0, 1})).empty());
  CHECK(checkpoint_issues(small_job({"ckpt", 1, 3})).empty());
  CHECK(checkpoint_issues(small_job({"", 0, 5})).empty());  // no dir, nothing saved: keep is harmless
  CHECK(checkpoint_issues(small_job({"ckpt", -1, 3})) ==
        std::vector<std::string>{"checkpoint.every | checkpoint.every must be >= 0, got -1"});
  CHECK(checkpoint_issues(small_job({"ckpt", 10, 0})) ==
        std::vector<std::string>{"checkpoint.keep | checkpoint.keep must be >= 1, got 0"});
  CHECK(checkpoint_issues(small_job({"", 10, -2})) ==
        std::vector<std::string>{"checkpoint.keep | checkpoint.keep must be >= 1, got -2",
                                 "checkpoint.every | checkpoint.every is 10 but checkpoint.dir is empty; set the "
                                 "directory to save in"});
  Status status = check_job(small_job({"", 5, 3}));
  CHECK(status.code() == Code::kInvalidArgument);
  CHECK(status.message() == "checkpoint.every is 5 but checkpoint.dir is empty; set the directory to save in");
  CHECK(JobBuilder("b").build().checkpoint == CheckpointConfig{});
  auto built = [] {
    JobBuilder b("b");
    b.checkpoint({.dir = "ckpt", .every = 20});
    return b.job().checkpoint;
  }();
  CHECK(built == CheckpointConfig{"ckpt", 20, 3});
}

TEST_CASE("checker errors in a file name the checkpoint field's line") {
  auto job = parse("\"checkpoint\": {\n    \"dir\": \"ckpt\",\n    \"every\": -5\n  }");
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().message() == "ckpt.json:18: checkpoint.every must be >= 0, got -5");
  auto keep = parse(R"("checkpoint": {"keep": 9999999999})");
  REQUIRE_FALSE(keep.ok());
  CHECK(keep.status().message() == "ckpt.json:16: checkpoint.keep: 9999999999 is out of range");
  auto typed = parse(R"("checkpoint": {"dir": 5})");
  CHECK_FALSE(typed.ok());
}

}  // namespace rill::graph
