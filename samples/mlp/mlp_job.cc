#include "samples/mlp/mlp_job.h"

#include "graph/job_builder.h"

namespace rill::samples {
namespace {

graph::Dataset fashion_mnist(const std::string& name, const std::string& dir, const std::string& prefix) {
  graph::Dataset d;
  d.name = name;
  d.kind = "idx";
  d.images = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  d.labels = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  d.scale = 1.0f / 255.0f;
  return d;
}

}  // namespace

graph::Job make_mlp_job(const std::string& data_dir) {
  JobBuilder b("mlp");
  b.dataset(fashion_mnist("train", data_dir, "train"));
  b.dataset(fashion_mnist("test", data_dir, "t10k"));
  TensorHandle x = b.input("x", "train", "image", {784});
  TensorHandle y = b.input("y", "train", "label", {}, DType::kI32);

  TensorHandle w1 = b.variable("w1", {784, 512}, init::xavier_uniform(1));
  TensorHandle b1 = b.variable("b1", {512}, init::zeros());
  TensorHandle w2 = b.variable("w2", {512, 512}, init::xavier_uniform(2));
  TensorHandle b2 = b.variable("b2", {512}, init::zeros());
  TensorHandle w3 = b.variable("w3", {512, 10}, init::xavier_uniform(3));
  TensorHandle b3 = b.variable("b3", {10}, init::zeros());

  TensorHandle h1 = b.relu(b.bias_add(b.matmul(x, w1, {.name = "fc1"}), b1, {.name = "fc1_bias"}), {.name = "h1"});
  TensorHandle h2 = b.relu(b.bias_add(b.matmul(h1, w2, {.name = "fc2"}), b2, {.name = "fc2_bias"}), {.name = "h2"});
  TensorHandle logits = b.bias_add(b.matmul(h2, w3, {.name = "fc3"}), b3, {.name = "logits"});
  TensorHandle xent = b.sparse_softmax_cross_entropy(logits, y, {.name = "xent"});
  TensorHandle loss = b.reduce_mean(xent, {}, false, {.name = "loss"});
  TensorHandle acc = b.accuracy(logits, y, {.name = "acc"});

  b.minimize(loss, optim::momentum(0.03, 0.9));
  b.metric("accuracy", acc);
  b.train({.epochs = 2, .batch_size = 256, .log_every = 50, .seed = 1});
  b.eval({.dataset = "test", .batch_size = 500});
  return b.build();
}

}  // namespace rill::samples
