// JobBuilder: the C++ job API. A model reads like single-device code; the
// builder records inputs, variables and ops into a graph::Job, the same value
// a job file loads into, so the two ways of writing a job meet there.
//
//   rill::JobBuilder b("mlp");
//   b.dataset(train_spec);
//   auto x = b.input("x", "train", "image", {784});
//   auto y = b.input("y", "train", "label", {}, rill::DType::kI32);
//   auto w1 = b.variable("w1", {784, 512}, rill::init::xavier_uniform(1));
//   auto b1 = b.variable("b1", {512}, rill::init::zeros());
//   auto h1 = b.relu(b.bias_add(b.matmul(x, w1, {.name = "fc1"}), b1));
//   ...
//   b.minimize(loss, rill::optim::momentum(0.03, 0.9));
//   b.metric("accuracy", b.accuracy(logits, y));
//   b.train({.epochs = 2, .batch_size = 256});
//   StatusOr<graph::Job> job = b.build_checked();
//
// Op helpers set only the attributes they are given (a default stays absent,
// as in a job file that leaves it out). An op without a name gets
// "<type>_<n>", the first n from 1 not yet used, so names are deterministic.
// Mistakes (an unknown tensor, a shape mismatch) are found by check_job when
// the job is built, with the same messages a job file gets.
//
// A JobBuilder is a plain single-threaded object; use one per thread.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "graph/job.h"

namespace rill {

// A tensor of the job being built: its name. Small; pass by value.
struct TensorHandle {
  std::string name;
  bool operator==(const TensorHandle&) const = default;
};

// Options every op helper takes last.
struct OpOptions {
  std::string name;        // the op's name and its output's; "" for "<type>_<n>"
  std::optional<NdSbp> sbp;  // SBP hint for the output
  Attrs attrs;             // more attributes, e.g. {{"transpose_b", int64_t{1}}}
  std::optional<graph::Placement> placement;  // default: the job's devices
};

struct VariableOptions {
  DType dtype = DType::kF32;
  std::optional<NdSbp> sbp;  // default B
  bool trainable = true;
  std::optional<graph::Placement> placement;  // default: the job's devices
  std::optional<int64_t> sequence_axis;        // graph/job.h Variable: a position table's 0
};

namespace init {
graph::Initializer fill(double value);
graph::Initializer zeros();  // fill(0)
graph::Initializer uniform(double low, double high, int64_t seed);
graph::Initializer normal(double mean, double std, int64_t seed);
graph::Initializer xavier_uniform(int64_t seed);
graph::Initializer kaiming_uniform(int64_t seed);
}  // namespace init

namespace optim {
graph::Optimizer sgd(double lr);
graph::Optimizer momentum(double lr, double momentum = 0.9);
graph::Optimizer adam(double lr, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8);
}  // namespace optim

class JobBuilder {
 public:
  explicit JobBuilder(std::string name);

  void dataset(graph::Dataset spec);
  TensorHandle input(const std::string& name, const std::string& dataset, const std::string& field, Shape shape,
                     DType dtype = DType::kF32, std::optional<NdSbp> sbp = std::nullopt,
                     std::optional<graph::Placement> placement = std::nullopt,
                     std::optional<int64_t> sequence_axis = std::nullopt);  // graph/job.h Input
  TensorHandle variable(const std::string& name, Shape shape, graph::Initializer init,
                        const VariableOptions& options = {});

  // Any op type with one output; `attrs` and options.attrs are merged.
  TensorHandle op(const std::string& type, std::vector<TensorHandle> inputs, Attrs attrs = {},
                  const OpOptions& options = {});
  // Any op type with `num_outputs` outputs, named "<name>:<i>".
  std::vector<TensorHandle> op_outputs(const std::string& type, std::vector<TensorHandle> inputs, int num_outputs,
                                       Attrs attrs = {}, const OpOptions& options = {});

  TensorHandle matmul(TensorHandle a, TensorHandle b, const OpOptions& options = {});
  TensorHandle matmul(TensorHandle a, TensorHandle b, bool transpose_a, bool transpose_b,
                      const OpOptions& options = {});
  TensorHandle add(TensorHandle a, TensorHandle b, const OpOptions& options = {});
  TensorHandle sub(TensorHandle a, TensorHandle b, const OpOptions& options = {});
  TensorHandle mul(TensorHandle a, TensorHandle b, const OpOptions& options = {});
  TensorHandle bias_add(TensorHandle x, TensorHandle bias, const OpOptions& options = {});
  TensorHandle relu(TensorHandle x, const OpOptions& options = {});
  TensorHandle gelu(TensorHandle x, const OpOptions& options = {});
  TensorHandle tanh(TensorHandle x, const OpOptions& options = {});
  TensorHandle sigmoid(TensorHandle x, const OpOptions& options = {});
  TensorHandle softmax(TensorHandle x, const OpOptions& options = {});
  TensorHandle sparse_softmax_cross_entropy(TensorHandle logits, TensorHandle labels, const OpOptions& options = {});
  // reduction: "" leaves the op's default.
  TensorHandle mse_loss(TensorHandle prediction, TensorHandle target, const std::string& reduction = "",
                        const OpOptions& options = {});
  // axes: {} reduces every axis (the attr is left out).
  TensorHandle reduce_sum(TensorHandle x, std::vector<int64_t> axes = {}, bool keepdims = false,
                          const OpOptions& options = {});
  TensorHandle reduce_mean(TensorHandle x, std::vector<int64_t> axes = {}, bool keepdims = false,
                           const OpOptions& options = {});
  TensorHandle reshape(TensorHandle x, std::vector<int64_t> shape, const OpOptions& options = {});
  TensorHandle transpose(TensorHandle x, std::vector<int64_t> perm, const OpOptions& options = {});
  TensorHandle identity(TensorHandle x, const OpOptions& options = {});
  TensorHandle slice(TensorHandle x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                     const OpOptions& options = {});
  TensorHandle concat(std::vector<TensorHandle> xs, int64_t axis, const OpOptions& options = {});
  TensorHandle accuracy(TensorHandle logits, TensorHandle labels, const OpOptions& options = {});
  TensorHandle scale(TensorHandle x, double factor, const OpOptions& options = {});
  // Collectives over the ranks, for jobs in the mirrored view (TrainConfig::view "mirrored"):
  // every rank's x combined ("sum", "mean", "max", "min" or "prod"), concatenated along axis 0, or
  // combined and cut into one block of axis 0 per rank.
  TensorHandle all_reduce(TensorHandle x, const std::string& reduce = "sum", const OpOptions& options = {});
  TensorHandle all_gather(TensorHandle x, const OpOptions& options = {});
  TensorHandle reduce_scatter(TensorHandle x, const std::string& reduce = "sum", const OpOptions& options = {});

  // Puts `members` (inputs, variables or ops, by the tensor an op makes or
  // its name) on `placement`, e.g. graph::parse_placement("cpu 1:0-1").
  void group(const std::string& name, graph::Placement placement, const std::vector<TensorHandle>& members);
  // Pipeline stages: groups by name, first stage first (every input,
  // variable and op must be in one); or pipeline_stages(n) to let the
  // compiler cut the ops into n stages balanced by "params" or "flops".
  void pipeline(std::vector<std::string> stage_groups);
  void pipeline_stages(int64_t n, const std::string& balance = "params");

  void minimize(TensorHandle loss, graph::Optimizer optimizer);
  void metric(const std::string& name, TensorHandle tensor);
  // The result carries `tensor`'s whole value at the last step (gathered
  // from every device onto the master).
  void fetch(TensorHandle tensor);
  void train(graph::TrainConfig config);
  void eval(graph::Eval eval);
  void checkpoint(graph::CheckpointConfig config);

  // The job so far, unchecked.
  const graph::Job& job() const { return job_; }
  graph::Job build() const { return job_; }
  // The job, or check_job's error.
  StatusOr<graph::Job> build_checked() const;

 private:
  std::string fresh_name(const std::string& type, const std::string& requested);

  graph::Job job_;
  std::set<std::string> used_names_;
};

}  // namespace rill
