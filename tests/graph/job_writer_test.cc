#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "graph/job_builder.h"
#include "graph/job_file.h"
#include "samples/linear_regression/linear_regression_job.h"
#include "samples/mlp/mlp_job.h"
#include "tests/graph/test_paths.h"

namespace rill::graph {
namespace {

using testing::source_path;

// Writes `job`, reads it back, and returns the text; the job read back must
// equal `job`, and writing it again must give the same text.
std::string check_round_trip(const Job& job) {
  StatusOr<std::string> text = job_to_json(job);
  REQUIRE_MESSAGE(text.ok(), text.status().to_string());
  StatusOr<Job> back = parse_job_json(*text, "written.json");
  REQUIRE_MESSAGE(back.ok(), back.status().to_string() << "\n" << *text);
  CHECK_MESSAGE(*back == job, *text);
  StatusOr<std::string> again = job_to_json(*back);
  REQUIRE(again.ok());
  CHECK(*again == *text);
  return *text;
}

std::string error_of(const Job& job) {
  StatusOr<std::string> text = job_to_json(job);
  REQUIRE_MESSAGE(!text.ok(), *text);
  CHECK(text.status().code() == Code::kInvalidArgument);
  return text.status().message();
}

Dataset synthetic(const std::string& name) {
  Dataset d;
  d.name = name;
  d.kind = "synthetic";
  d.num_samples = 64;
  d.num_classes = 3;
  d.feature_shape = {2, 2};
  return d;
}

// A valid job that sets every field of every section to a value other than
// its default, with values that are hard to print exactly.
Job every_field_job() {
  Job job;
  job.name = "every \"field\" \\ \n\t\x01\x7f caf\xc3\xa9 \xe2\x82\xac // not /* a comment";
  Dataset idx;
  idx.name = "images";
  idx.kind = "idx";
  idx.images = "/data/train-images-idx3-ubyte.gz";
  idx.labels = "/data/train-labels-idx1-ubyte.gz";
  idx.scale = 1.0f / 255.0f;
  Dataset csv;
  csv.name = "table";
  csv.kind = "csv";
  csv.path = "/data/table.csv";
  csv.label_column = 3;
  csv.header = true;
  csv.scale = 0.1f;
  Dataset synth = synthetic("synth");
  synth.seed = std::numeric_limits<int64_t>::max();
  synth.scale = std::nextafter(1.0f, 2.0f);
  Dataset mem;
  mem.name = "mem";
  mem.kind = "inline";
  float inf = std::numeric_limits<float>::infinity();
  mem.tensors.push_back({"f", {4, 3}, DType::kF32,
                         {0.1f, 1.0f / 3.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), 16777216.0f, -2.5f,
                          1e-7f, 3.14159274f, inf, -inf},
                         {}});
  mem.tensors.push_back({"l", {4}, DType::kI32, {}, {0, std::numeric_limits<int32_t>::min(), 2147483647, 1}});
  job.datasets = {idx, csv, synth, mem, synthetic("synth_eval")};

  job.inputs.push_back({"x", "synth", "features", {2, 2}, DType::kF32, Sbp::split(0)});
  job.inputs.push_back({"y", "synth", "label", {}, DType::kI32, Sbp::broadcast()});
  job.variables.push_back({"w", {4, 3}, DType::kF32, {"uniform", {{"low", -0.1}, {"high", 0.1}, {"seed", int64_t{5}}}},
                           Sbp::split(1), true});
  job.variables.push_back({"b", {3}, DType::kF32,
                           {"fill", {{"value", 1.0 / 3.0}, {"shape", std::vector<int64_t>{3}}}}, std::nullopt, true});
  job.variables.push_back({"n", {3}, DType::kF32, {"normal", {{"mean", 0.0}, {"std", 0.02}, {"seed", int64_t{7}}}},
                           Sbp::broadcast(), false});
  job.variables.push_back({"k", {4, 3}, DType::kF32, {"kaiming_uniform", {{"seed", int64_t{8}}}}, std::nullopt, true});
  job.variables.push_back({"count", {1}, DType::kI32, {"fill", {{"value", 0.0}}}, std::nullopt, false});

  job.ops.push_back({"flat", "reshape", {"x"}, {"flat"}, {{"shape", std::vector<int64_t>{-1, 4}}}, {}});
  job.ops.push_back({"mm", "matmul", {"flat", "w"}, {"mm_out"},
                     {{"transpose_a", int64_t{0}}, {"transpose_b", int64_t{0}}}, {std::nullopt}});
  job.ops.push_back({"biased", "bias_add", {"mm_out", "b"}, {"biased"}, {{"axis", int64_t{1}}}, {Sbp::broadcast()}});
  job.ops.push_back({"scaled", "scale", {"biased"}, {"scaled"}, {{"scale", 0.1 + 0.2}}, {}});
  job.ops.push_back({"sums", "reduce_sum", {"scaled"}, {"sums"},
                     {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}}, {}});
  job.ops.push_back({"xent", "sparse_softmax_cross_entropy", {"scaled", "y"}, {"xent"}, {}, {}});
  job.ops.push_back({"loss", "reduce_mean", {"xent"}, {"loss"}, {}, {}});
  job.ops.push_back({"mse", "mse_loss", {"scaled", "scaled"}, {"mse"}, {{"reduction", std::string("mean")}}, {}});
  job.ops.push_back({"acc", "accuracy", {"scaled", "y"}, {"acc"}, {}, {}});
  job.loss = "loss";
  job.metrics = {{"accuracy", "acc"}, {"mse", "mse"}};
  job.optimizer = {"adam", 0.1 + 0.2, 0.5, 0.875, 1.0 - std::ldexp(1.0, -40), 5e-324, 1e-4};
  job.train = {7, 3, 16, 2, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), false, "cpu:2"};
  job.train.compression = Compression::kPowerSGD;
  job.train.compression_rank = 4;
  job.train.compression_start_step = 5;
  job.eval = Eval{"synth_eval", 32};
  return job;
}

// A valid job that uses every op helper of JobBuilder.
Job every_helper_job() {
  JobBuilder b("helpers");
  b.dataset(synthetic("d"));
  TensorHandle x4 = b.input("x", "d", "features", {2, 2});
  TensorHandle y = b.input("y", "d", "label", {}, DType::kI32, Sbp::split(0));
  TensorHandle w = b.variable("w", {4, 4}, init::xavier_uniform(1));
  TensorHandle bias = b.variable("bias", {4}, init::zeros(), {.sbp = Sbp::broadcast()});
  TensorHandle w2 = b.variable("w2", {4, 3}, init::normal(0, 0.1, 2), {.sbp = NdSbp(Sbp::broadcast(), Sbp::split(1))});
  TensorHandle u = b.variable("u", {}, init::uniform(-1, 1, 3), {.trainable = false});
  TensorHandle k = b.variable("k", {4, 4}, init::kaiming_uniform(4));
  TensorHandle f = b.variable("f", {}, init::fill(0.25));
  TensorHandle x = b.reshape(x4, {-1, 4});
  TensorHandle h = b.bias_add(b.matmul(x, w, {.sbp = Sbp::split(0)}), bias);
  TensorHandle a = b.add(h, u);
  TensorHandle s = b.sub(a, b.matmul(x, k));
  TensorHandle m = b.mul(s, f);
  TensorHandle act = b.sigmoid(b.tanh(b.gelu(b.relu(m))));
  TensorHandle t = b.matmul(act, w, false, true, {.name = "mm_t"});
  TensorHandle t2 = b.matmul(w, w2, true, false, {.name = "mm_ta"});
  TensorHandle boxed = b.transpose(b.reshape(t, {-1, 2, 2}), {0, 2, 1});
  TensorHandle flat = b.identity(b.reshape(boxed, {-1, 4}));
  TensorHandle left = b.slice(flat, {0, 0}, {-1, 2});
  TensorHandle right = b.slice(flat, {0, 2}, {-1, 4});
  TensorHandle joined = b.concat({left, right}, 1);
  TensorHandle logits = b.matmul(b.scale(joined, 0.5), w2, {.name = "logits"});
  TensorHandle probs = b.softmax(logits);
  TensorHandle xent = b.sparse_softmax_cross_entropy(logits, y);
  TensorHandle loss = b.add(b.reduce_mean(xent), b.mse_loss(probs, probs, "mean"));
  b.minimize(loss, optim::momentum(0.05));
  b.metric("accuracy", b.accuracy(logits, y));
  b.metric("mass", b.reduce_sum(b.reduce_sum(probs, {1}, true)));
  b.metric("summed", b.mse_loss(probs, probs));
  b.metric("corner", b.reduce_mean(t2));
  b.train({.steps = 3, .batch_size = 8, .shuffle = false});
  b.eval({.dataset = "d", .batch_size = 16});
  return b.build();
}

Job small_job_with_op_attrs(Attrs attrs) {
  JobBuilder b("small");
  b.dataset(synthetic("d"));
  TensorHandle x = b.input("x", "d", "features", {2, 2});
  b.minimize(b.op("reduce_mean", {x}, std::move(attrs), {.name = "loss"}), optim::sgd(0.1));
  b.train({.steps = 1, .batch_size = 4});
  return b.build();
}

}  // namespace

TEST_CASE("job_to_json round-trips the sample job files and their C++ forms") {
  for (const char* file : {"samples/mlp/mlp.json", "samples/mlp/mlp_model_parallel.json", "samples/mlp/mlp_hybrid.json",
                           "samples/mlp/mlp_stages.json", "samples/mlp/mlp_pipeline.json",
                           "samples/mlp/mlp_pipeline3.json", "samples/linear_regression/linear_regression.json",
                           "samples/ddp/ddp_train.json", "samples/gpt/gpt_moby_short.json",
                           "samples/gpt2/gpt2_moby_bpe.json", "samples/gpt_context/gpt_context.json"}) {
    CAPTURE(file);
    StatusOr<Job> loaded = load_job_file(source_path(file));
    REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
    const std::string text = check_round_trip(*loaded);
    if (std::string(file).find("gpt_context") != std::string::npos) {  // the sequence's marks
      CHECK(text.find("\"sbp\": \"B\",\n      \"sequence_axis\": 1\n") != std::string::npos);
      CHECK(text.find("\"sequence_axis\": 0") != std::string::npos);
    }
  }
  check_round_trip(samples::make_mlp_job());
  check_round_trip(samples::make_linear_regression_job());
  // A pipeline cut by the compiler, from C++ (stages named: the samples).
  JobBuilder b("cut");
  b.dataset(synthetic("d"));
  TensorHandle x = b.input("x", "d", "features", {2, 2});
  b.minimize(b.reduce_mean(b.relu(x), {}, false, {.name = "loss"}), optim::sgd(0.1));
  b.train({.steps = 1, .batch_size = 4, .micro_batches = 2, .schedule = graph::Schedule::kGpipe});
  b.pipeline_stages(2, "flops");
  Job cut = b.build();
  REQUIRE(cut.pipeline);
  CHECK(*cut.pipeline == Pipeline{{}, 2, "flops"});
  const std::string text = check_round_trip(cut);
  CHECK(text.find("\"pipeline\": {\"num_stages\": 2, \"balance\": \"flops\"}") != std::string::npos);
  CHECK(text.find("\"schedule\": \"gpipe\"") != std::string::npos);
  b.pipeline({"a", "b"});
  CHECK(*b.build().pipeline == Pipeline{{"a", "b"}, 0, "params"});
}

TEST_CASE("job_to_json writes the MLP sample in the sample's layout") {
  std::string text = check_round_trip(samples::make_mlp_job());
  CHECK(text.find("{\n  \"name\": \"mlp\",\n  \"datasets\": [\n    {\n      \"name\": \"train\",\n") == 0);
  CHECK(text.find("\n    {\"name\": \"y\", \"dataset\": \"train\", \"field\": \"label\", \"shape\": [], "
                  "\"dtype\": \"i32\"}\n  ],\n") != std::string::npos);
  CHECK(text.find("\n    {\"name\": \"w1\", \"shape\": [784, 512], \"init\": {\"type\": \"xavier_uniform\", "
                  "\"seed\": 1}},\n") != std::string::npos);
  CHECK(text.find("{\"name\": \"b1\", \"shape\": [512], \"init\": {\"type\": \"fill\", \"value\": 0}}") !=
        std::string::npos);
  CHECK(text.find("\n    {\"name\": \"fc1\", \"type\": \"matmul\", \"inputs\": [\"x\", \"w1\"]},\n") !=
        std::string::npos);
  CHECK(text.find("\"optimizer\": {\"type\": \"momentum\", \"lr\": 0.03, \"momentum\": 0.9},") != std::string::npos);
  CHECK(text.find("\"scale\": 0.003921569") != std::string::npos);  // 1/255 as a float, shortest
  CHECK(text.back() == '\n');
}

TEST_CASE("job_to_json round-trips every field and every dataset kind") {
  Job job = every_field_job();
  std::string text = check_round_trip(job);
  // Fields at their defaults are left out; those set here are all written.
  for (const char* field : {"\"images\"", "\"labels\"", "\"path\"", "\"label_column\": 3", "\"header\": true",
                            "\"num_samples\": 64", "\"num_classes\": 3", "\"feature_shape\": [2, 2]",
                            "\"seed\": 9223372036854775807", "\"tensors\"", "\"dtype\": \"i32\"",
                            "\"sbp\": \"S(0)\"", "\"sbp\": \"S(1)\"", "\"sbp\": [\"\"]", "\"sbp\": [\"B\"]",
                            "\"trainable\": false", "\"outputs\": [\"mm_out\"]", "\"transpose_a\": false",
                            "\"keepdims\": true", "\"reduction\": \"mean\"", "\"weight_decay\": 0.0001",
                            "\"epsilon\": 5e-324", "\"lr\": 0.30000000000000004", "inf, -inf\n",
                            "\"devices\": \"cpu:2\"", "\"compression\": \"powersgd\"", "\"compression_rank\": 4",
                            "\"compression_start_step\": 5",
                            "\"eval\": {\"dataset\": \"synth_eval\", \"batch_size\": 32}"})
    CHECK_MESSAGE(text.find(field) != std::string::npos, field);
  CHECK(text.find("\"outputs\": [\"flat\"]") == std::string::npos);  // the default, the op's name

  // The writer's exactness, not the parser's luck: nearby values differ.
  Job nudged = job;
  nudged.datasets[3].tensors[0].f32[1] = std::nextafter(1.0f / 3.0f, 1.0f);
  nudged.optimizer.lr = std::nextafter(0.1 + 0.2, 1.0);
  StatusOr<std::string> nudged_text = job_to_json(nudged);
  REQUIRE(nudged_text.ok());
  CHECK(*nudged_text != text);
  check_round_trip(nudged);
}

TEST_CASE("job_to_json round-trips a JobBuilder job using every op helper") {
  Job job = every_helper_job();
  StatusOr<Job> checked = parse_job_json(*job_to_json(job), "helpers.json");
  REQUIRE_MESSAGE(checked.ok(), checked.status().to_string());
  check_round_trip(job);
}

TEST_CASE("job_to_json round-trips a large inline dataset and keeps lines within 100 columns") {
  Job job = every_field_job();
  Dataset big;
  big.name = "big";
  big.kind = "inline";
  InlineTensor t{"t", {500, 3}, DType::kF32, {}, {}};
  for (int i = 0; i < 1500; ++i) t.f32.push_back(static_cast<float>(i) / 7.0f);
  big.tensors.push_back(t);
  job.datasets.push_back(big);
  std::string first = check_round_trip(job);
  CHECK(first == *job_to_json(job));
  std::istringstream lines(first);
  size_t longest = 0, count = 0;
  for (std::string line; std::getline(lines, line); ++count) longest = std::max(longest, line.size());
  CHECK(longest <= 100);
  CHECK(count > 100);  // the long data list is broken into lines
}

TEST_CASE("job_to_json reports what a job file cannot hold, naming the element") {
  SUBCASE("an attribute the schema does not know") {
    std::string message = error_of(small_job_with_op_attrs({{"frobnicate", int64_t{1}}}));
    CHECK(message.find("writing job 'small': ops[0] (loss) of type 'reduce_mean': attribute 'frobnicate' cannot be "
                       "written: job files have no such attribute (known: transpose_a, transpose_b, keepdims,") == 0);
  }
  SUBCASE("an attribute of another type than the loader reads") {
    CHECK(error_of(small_job_with_op_attrs({{"scale", int64_t{2}}})) ==
          "writing job 'small': ops[0] (loss) of type 'reduce_mean': attribute 'scale' is an int but job files "
          "hold it as a float, so it would not read back the same");
    CHECK(error_of(small_job_with_op_attrs({{"axes", int64_t{1}}})).find("'axes' is an int but job files hold it "
                                                                         "as an int list") != std::string::npos);
    CHECK(error_of(small_job_with_op_attrs({{"keepdims", int64_t{2}}})).find("'keepdims' is an int but job files "
                                                                             "hold it as a bool") != std::string::npos);
    CHECK(error_of(small_job_with_op_attrs({{"axis", 1.0}})).find("'axis' is a float") != std::string::npos);
  }
  SUBCASE("an initializer attribute") {
    Job job = small_job_with_op_attrs({});
    job.variables.push_back({"v", {2}, DType::kF32, {"fill", {{"type", std::string("x")}}}, std::nullopt, true});
    CHECK(error_of(job).find("variables[0] (v): init: attribute 'type' cannot be written") != std::string::npos);
    job.variables[0].init.attrs = {{"axes", std::vector<int64_t>{1}}};
    CHECK(error_of(job).find("init: attribute 'axes' cannot be written") != std::string::npos);
  }
  SUBCASE("values out of a job file's range") {
    Job job = small_job_with_op_attrs({});
    job.train.seed = std::numeric_limits<uint64_t>::max();
    CHECK(error_of(job) == "writing job 'small': train.seed: 18446744073709551615 is above 2^63-1, the largest seed "
                           "a job file holds");
    job = small_job_with_op_attrs({});
    job.inputs[0].sbp = Sbp::split(12);
    CHECK(error_of(job).find("inputs[0] (x): SBP S(12) cannot be written") != std::string::npos);
    job = small_job_with_op_attrs({});
    job.ops[0].name = "bad\xff";
    CHECK(error_of(job).find("name: the text is not valid UTF-8") != std::string::npos);
  }
  SUBCASE("inline data that does not match its dtype") {
    Job job = small_job_with_op_attrs({});
    job.datasets.push_back({.name = "m", .kind = "inline", .tensors = {{"t", {1}, DType::kF32, {}, {1}}}});
    CHECK(error_of(job).find("datasets[1] (m): tensors[0] (t): its dtype is f32, but it holds values of another "
                             "dtype (1 of them)") != std::string::npos);
  }
}

}  // namespace rill::graph
