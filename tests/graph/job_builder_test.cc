#include <doctest/doctest.h>

#include "graph/job_builder.h"
#include "samples/mlp/mlp_job.h"

namespace rill {

TEST_CASE("JobBuilder names unnamed ops <type>_<n>, skipping names in use") {
  JobBuilder b("names");
  graph::Dataset d;
  d.name = "d";
  d.kind = "synthetic";
  d.num_samples = 16;
  d.feature_shape = {4};
  b.dataset(d);
  TensorHandle x = b.input("x", "d", "features", {4});
  TensorHandle w = b.variable("matmul_1", {4, 4}, init::normal(0, 0.1, 3));
  TensorHandle h = b.matmul(x, w);
  TensorHandle r = b.relu(h);
  TensorHandle h2 = b.matmul(r, w);
  TensorHandle named = b.tanh(h2, {.name = "out"});
  CHECK(h.name == "matmul_2");
  CHECK(r.name == "relu_1");
  CHECK(h2.name == "matmul_3");
  CHECK(named.name == "out");
  const graph::Job& job = b.job();
  REQUIRE(job.ops.size() == 4);
  CHECK(job.ops[0].inputs == std::vector<std::string>{"x", "matmul_1"});
  CHECK(job.ops[0].outputs == std::vector<std::string>{"matmul_2"});
  CHECK(job.variables[0].init == graph::Initializer{"normal", {{"mean", 0.0}, {"std", 0.1}, {"seed", int64_t{3}}}});
}

TEST_CASE("JobBuilder op helpers set only the attributes they are given") {
  JobBuilder b("attrs");
  TensorHandle x{"x"}, y{"y"};
  b.matmul(x, y, true, false, {.name = "mm"});
  b.reduce_sum(x, {1}, true, {.name = "rs"});
  b.reduce_mean(x, {}, false, {.name = "rm"});
  b.mse_loss(x, y, "mean", {.name = "mse"});
  b.reshape(x, {-1, 4}, {.name = "rh"});
  b.transpose(x, {1, 0}, {.name = "tr"});
  b.slice(x, {0, 1}, {2, 3}, {.name = "sl"});
  b.concat({x, y}, 1, {.name = "cc"});
  b.scale(x, 0.5, {.name = "sc"});
  b.matmul(x, y, {.name = "extra", .sbp = Sbp::split(0), .attrs = {{"transpose_b", int64_t{1}}}});
  auto multi = b.op_outputs("custom", {x}, 2, {{"axis", int64_t{0}}});
  const auto& ops = b.job().ops;
  CHECK(ops[0].attrs == Attrs{{"transpose_a", int64_t{1}}});
  CHECK(ops[1].attrs == Attrs{{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}});
  CHECK(ops[2].attrs.values().empty());
  CHECK(ops[3].attrs == Attrs{{"reduction", std::string("mean")}});
  CHECK(ops[4].attrs == Attrs{{"shape", std::vector<int64_t>{-1, 4}}});
  CHECK(ops[5].attrs == Attrs{{"perm", std::vector<int64_t>{1, 0}}});
  CHECK(ops[6].attrs == Attrs{{"starts", std::vector<int64_t>{0, 1}}, {"ends", std::vector<int64_t>{2, 3}}});
  CHECK(ops[7].attrs == Attrs{{"axis", int64_t{1}}});
  CHECK(ops[7].inputs == std::vector<std::string>{"x", "y"});
  CHECK(ops[8].attrs == Attrs{{"scale", 0.5}});
  CHECK(ops[9].attrs == Attrs{{"transpose_b", int64_t{1}}});
  CHECK(ops[9].output_sbp == std::vector<std::optional<NdSbp>>{Sbp::split(0)});
  CHECK(multi == std::vector<TensorHandle>{{"custom_1:0"}, {"custom_1:1"}});
  CHECK(ops[10].outputs == std::vector<std::string>{"custom_1:0", "custom_1:1"});
  b.all_reduce(x, "mean", {.name = "ar"});
  b.all_gather(x, {.name = "ag"});
  b.reduce_scatter(x, "sum", {.name = "rsc"});
  CHECK(ops[11].type == "all_reduce");
  CHECK(ops[11].attrs == Attrs{{"reduce", std::string("mean")}});
  CHECK(ops[12].type == "all_gather");
  CHECK(ops[12].attrs.values().empty());
  CHECK(ops[13].attrs == Attrs{{"reduce", std::string("sum")}});
}

TEST_CASE("build_checked reports mistakes with the job file's messages") {
  graph::Job good = samples::make_mlp_job();
  JobBuilder b("broken");
  for (const graph::Dataset& d : good.datasets) b.dataset(d);
  TensorHandle x = b.input("x", "train", "image", {784});
  TensorHandle w = b.variable("w", {784, 10}, init::xavier_uniform(1));
  TensorHandle logits = b.matmul(x, w, {.name = "logits"});
  b.minimize(b.reduce_mean(TensorHandle{"logitz"}, {}, false, {.name = "loss"}), optim::sgd(0.1));
  b.train({.steps = 10, .batch_size = 32});
  auto job = b.build_checked();
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().message() ==
        "job 'broken': ops[1] (loss): input 'logitz' is not defined (did you mean 'logits'?) (known: x, w, logits)");
  (void)logits;
}

TEST_CASE("the MLP built in C++ passes the checker") {
  JobBuilder b("tiny");
  graph::Dataset d;
  d.name = "d";
  d.kind = "synthetic";
  d.num_samples = 32;
  d.feature_shape = {8};
  d.num_classes = 4;
  b.dataset(d);
  TensorHandle x = b.input("x", "d", "features", {8});
  TensorHandle y = b.input("y", "d", "label", {}, DType::kI32);
  TensorHandle w = b.variable("w", {8, 4}, init::kaiming_uniform(5));
  TensorHandle bias = b.variable("bias", {4}, init::zeros());
  TensorHandle logits = b.bias_add(b.matmul(x, w), bias);
  TensorHandle loss = b.reduce_mean(b.sparse_softmax_cross_entropy(logits, y));
  b.minimize(loss, optim::adam(0.01));
  b.metric("accuracy", b.accuracy(logits, y));
  b.train({.steps = 5, .batch_size = 8});
  b.eval({.dataset = "d", .batch_size = 16});
  auto job = b.build_checked();
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->optimizer.type == "adam");
  CHECK(job->loss == "reduce_mean_1");
  CHECK(job->metrics == std::vector<graph::Metric>{{"accuracy", "accuracy_1"}});
}

}  // namespace rill
