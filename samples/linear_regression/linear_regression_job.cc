#include "samples/linear_regression/linear_regression_job.h"

#include "graph/job_builder.h"

namespace rill::samples {

graph::Job make_linear_regression_job() {
  JobBuilder b("linear_regression");
  graph::Dataset data;
  data.name = "data";
  data.kind = "inline";
  // y = 2 x0 + 3 x1: training should find w = [2, 3].
  data.tensors.push_back({.name = "x", .shape = {4, 2}, .f32 = {1, 2, 2, 3, 4, 6, 3, 1}});
  data.tensors.push_back({.name = "y", .shape = {4, 1}, .f32 = {8, 13, 26, 9}});
  b.dataset(data);
  TensorHandle x = b.input("x", "data", "x", {2});
  TensorHandle y = b.input("y", "data", "y", {1});
  TensorHandle w = b.variable("w", {2, 1}, init::fill(0));
  TensorHandle y_pred = b.matmul(x, w, {.name = "y_pred"});
  TensorHandle loss = b.mse_loss(y_pred, y, "sum", {.name = "loss"});
  b.minimize(loss, optim::sgd(0.01));
  b.train({.steps = 500, .batch_size = 4, .log_every = 50, .shuffle = false});
  return b.build();
}

}  // namespace rill::samples
