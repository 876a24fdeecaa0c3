// Data that disagrees with the job is refused before the first step, on
// every node that reads it, naming the input, the field, the dataset, its
// files and both shapes: never copied past a slot (a crash) or shifted
// into the next sample (silent garbage).
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "graph/job_file.h"
#include "runtime/cluster/job_runner.h"
#include "tests/common/csv_job.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("an idx input declared with another size per sample than its images is refused, naming both") {
  // Fashion-MNIST's images hold [784] floats per sample (the job checker
  // cannot know: it reads no files); declared [700] (fewer: before, copied
  // past the slot, a crash) and [800] (more: before, rows shifted), each
  // with a first weight that agrees, so the job itself checks. On one
  // device and on two (a source per device).
  for (const auto& [declared, devices] : {std::pair<int64_t, const char*>{700, "cpu:1"}, {800, "cpu:2"}}) {
    CAPTURE(declared);
    graph::Job job = testing::load_sample("samples/mlp/mlp.json");
    for (graph::Input& in : job.inputs)
      if (in.name == "x") in.shape = {declared};
    for (graph::Variable& v : job.variables)
      if (v.name == "w1") v.shape[0] = declared;
    JobResult result = testing::run(job, devices, 3);
    REQUIRE_FALSE(result.status.ok());
    const std::string& message = result.status.message();
    INFO(message);
    CHECK(has(message, "input 'x' reads field 'image' of dataset 'train' (images '"));
    CHECK(has(message, "train-images-idx3-ubyte"));
    CHECK(has(message, fmt::format("the job declares [{}] f32 per sample, the data holds [784] f32", declared)));
  }
}

TEST_CASE("a CSV input declared with more features than the file's columns is refused, naming the file") {
  const auto dir = std::filesystem::temp_directory_path() / ("rill-csv-check-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto csv = dir / "rows.csv";
  std::ofstream(csv) << "1,0,0\n0,1,1\n1,0,0\n0,1,1\n";  // 2 features and a label
  auto job = graph::parse_job_json(testing::csv_classifier_job(csv.string(), 3, 2, 3), "csv_job.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  JobResult result = testing::run(*job, "cpu:1");
  REQUIRE_FALSE(result.status.ok());
  INFO(result.status.message());
  CHECK(has(result.status.message(), "(file '" + csv.string() + "')"));
  CHECK(has(result.status.message(), "the job declares [3] f32 per sample, the data holds [2] f32"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("an index outside what its reader takes is refused before the first step, naming the value and where") {
  // A label of class 2 for a loss over 2 classes (sample 3 of 4), and a
  // text's bytes for an embedding of 100 rows ('e' is 101): the sources
  // check every value against the least bound of the ops reading it.
  const auto dir = std::filesystem::temp_directory_path() / ("rill-index-check-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto csv = dir / "rows.csv", text = dir / "text.txt";
  std::ofstream(csv) << "1,0,0\n0,1,1\n1,0,2\n0,1,1\n";
  std::ofstream(text) << "abcdefgh abcdefgh abcdefgh";  // 'a' is 97; 'd' (100) is the first outside
  const std::string csv_job = testing::csv_classifier_job(csv.string(), 2, 2, 3);
  const std::string text_job = R"({"name": "text_job",
    "datasets": [{"name": "book", "kind": "text", "path": ")" + text.string() + R"(", "context": 4}],
    "inputs": [{"name": "idx", "dataset": "book", "field": "tokens", "shape": [4], "dtype": "i32"},
               {"name": "next", "dataset": "book", "field": "targets", "shape": [4], "dtype": "i32"}],
    "variables": [{"name": "wte", "shape": [100, 8], "init": {"type": "normal", "std": 0.02, "seed": 1}},
                  {"name": "head", "shape": [8, 256], "init": {"type": "fill", "value": 0}}],
    "ops": [{"name": "tok", "type": "embedding", "inputs": ["idx", "wte"]},
            {"name": "logits", "type": "matmul", "inputs": ["tok", "head"]},
            {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "next"]},
            {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
    "loss": "loss", "optimizer": {"type": "sgd", "lr": 0.1},
    "train": {"steps": 3, "batch_size": 2, "shuffle": false}})";
  const std::pair<std::string, std::string> cases[] = {
      {csv_job, "input 'y' reads field 'label' of dataset 'train': value 2 in sample 2, element 0 is not in [0, 2), "
                "the indices op xent (sparse_softmax_cross_entropy) reads"},
      {text_job, "input 'idx' reads field 'tokens' of dataset 'book': value 100 at token 3 of '" + text.string() +
                     "' is not in [0, 100), the indices op tok (embedding) reads"}};
  for (const auto& [source, expected] : cases)
    for (const char* devices : {"cpu:1", "cpu:2"}) {
      CAPTURE(devices);
      auto job = graph::parse_job_json(source, "index_job.json");
      REQUIRE_MESSAGE(job.ok(), job.status().to_string());
      JobResult result = testing::run(*job, devices);
      REQUIRE_FALSE(result.status.ok());
      INFO(result.status.message());
      CHECK(has(result.status.message(), expected));
      CHECK(result.loss_curve.empty());  // nothing ran
    }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rill
