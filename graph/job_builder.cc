#include "graph/job_builder.h"

#include "graph/job_check.h"

namespace rill {

namespace init {
graph::Initializer fill(double value) { return {"fill", {{"value", value}}}; }
graph::Initializer zeros() { return fill(0.0); }
graph::Initializer uniform(double low, double high, int64_t seed) {
  return {"uniform", {{"low", low}, {"high", high}, {"seed", seed}}};
}
graph::Initializer normal(double mean, double std, int64_t seed) {
  return {"normal", {{"mean", mean}, {"std", std}, {"seed", seed}}};
}
graph::Initializer xavier_uniform(int64_t seed) { return {"xavier_uniform", {{"seed", seed}}}; }
graph::Initializer kaiming_uniform(int64_t seed) { return {"kaiming_uniform", {{"seed", seed}}}; }
}  // namespace init

namespace optim {
graph::Optimizer sgd(double lr) {
  graph::Optimizer o;
  o.type = "sgd";
  o.lr = lr;
  return o;
}
graph::Optimizer momentum(double lr, double momentum) {
  graph::Optimizer o;
  o.type = "momentum";
  o.lr = lr;
  o.momentum = momentum;
  return o;
}
graph::Optimizer adam(double lr, double beta1, double beta2, double epsilon) {
  graph::Optimizer o;
  o.type = "adam";
  o.lr = lr;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.epsilon = epsilon;
  return o;
}
}  // namespace optim

namespace {

std::vector<std::string> names_of(const std::vector<TensorHandle>& tensors) {
  std::vector<std::string> names;
  for (const TensorHandle& t : tensors) names.push_back(t.name);
  return names;
}

Attrs with(Attrs attrs, const Attrs& more) {
  for (const auto& [name, value] : more.values()) attrs.set(name, value);
  return attrs;
}

}  // namespace

JobBuilder::JobBuilder(std::string name) { job_.name = std::move(name); }

std::string JobBuilder::fresh_name(const std::string& type, const std::string& requested) {
  if (!requested.empty()) {
    used_names_.insert(requested);
    return requested;  // a duplicate is check_job's to report
  }
  for (int n = 1;; ++n) {
    std::string name = fmt::format("{}_{}", type, n);
    if (used_names_.insert(name).second) return name;
  }
}

void JobBuilder::dataset(graph::Dataset spec) { job_.datasets.push_back(std::move(spec)); }

TensorHandle JobBuilder::input(const std::string& name, const std::string& dataset, const std::string& field,
                               Shape shape, DType dtype, std::optional<NdSbp> sbp,
                               std::optional<graph::Placement> placement, std::optional<int64_t> sequence_axis) {
  used_names_.insert(name);
  job_.inputs.push_back({name, dataset, field, std::move(shape), dtype, sbp, std::move(placement), sequence_axis});
  return {name};
}

TensorHandle JobBuilder::variable(const std::string& name, Shape shape, graph::Initializer init,
                                  const VariableOptions& options) {
  used_names_.insert(name);
  job_.variables.push_back({name, std::move(shape), options.dtype, std::move(init), options.sbp, options.trainable,
                            options.placement, std::nullopt, options.sequence_axis});
  return {name};
}

TensorHandle JobBuilder::op(const std::string& type, std::vector<TensorHandle> inputs, Attrs attrs,
                            const OpOptions& options) {
  graph::Op op;
  op.name = fresh_name(type, options.name);
  op.type = type;
  op.inputs = names_of(inputs);
  op.outputs = {op.name};
  op.attrs = with(std::move(attrs), options.attrs);
  if (options.sbp) op.output_sbp = {options.sbp};
  op.placement = options.placement;
  job_.ops.push_back(std::move(op));
  return {job_.ops.back().name};
}

std::vector<TensorHandle> JobBuilder::op_outputs(const std::string& type, std::vector<TensorHandle> inputs,
                                                 int num_outputs, Attrs attrs, const OpOptions& options) {
  graph::Op op;
  op.name = fresh_name(type, options.name);
  op.type = type;
  op.inputs = names_of(inputs);
  std::vector<TensorHandle> outputs;
  for (int i = 0; i < num_outputs; ++i) {
    std::string output = fmt::format("{}:{}", op.name, i);
    used_names_.insert(output);
    op.outputs.push_back(output);
    outputs.push_back({output});
  }
  op.attrs = with(std::move(attrs), options.attrs);
  if (options.sbp) op.output_sbp = {options.sbp};
  op.placement = options.placement;
  job_.ops.push_back(std::move(op));
  return outputs;
}

void JobBuilder::pipeline(std::vector<std::string> stage_groups) {
  job_.pipeline = graph::Pipeline{std::move(stage_groups), 0, "params"};
}

void JobBuilder::pipeline_stages(int64_t n, const std::string& balance) {
  job_.pipeline = graph::Pipeline{{}, n, balance};
}

void JobBuilder::group(const std::string& name, graph::Placement placement, const std::vector<TensorHandle>& members) {
  graph::Group g{name, std::move(placement), {}};
  for (const TensorHandle& m : members) {
    // An op's output "<op>:<i>" names the op.
    std::string member = m.name;
    for (const graph::Op& op : job_.ops)
      for (const std::string& out : op.outputs)
        if (out == m.name) member = op.name;
    g.members.push_back(std::move(member));
  }
  job_.groups.push_back(std::move(g));
}

TensorHandle JobBuilder::matmul(TensorHandle a, TensorHandle b, const OpOptions& options) {
  return op("matmul", {a, b}, {}, options);
}
TensorHandle JobBuilder::matmul(TensorHandle a, TensorHandle b, bool transpose_a, bool transpose_b,
                                const OpOptions& options) {
  Attrs attrs;
  if (transpose_a) attrs.set("transpose_a", int64_t{1});
  if (transpose_b) attrs.set("transpose_b", int64_t{1});
  return op("matmul", {a, b}, std::move(attrs), options);
}
TensorHandle JobBuilder::add(TensorHandle a, TensorHandle b, const OpOptions& o) { return op("add", {a, b}, {}, o); }
TensorHandle JobBuilder::sub(TensorHandle a, TensorHandle b, const OpOptions& o) { return op("sub", {a, b}, {}, o); }
TensorHandle JobBuilder::mul(TensorHandle a, TensorHandle b, const OpOptions& o) { return op("mul", {a, b}, {}, o); }
TensorHandle JobBuilder::bias_add(TensorHandle x, TensorHandle bias, const OpOptions& o) {
  return op("bias_add", {x, bias}, {}, o);
}
TensorHandle JobBuilder::relu(TensorHandle x, const OpOptions& o) { return op("relu", {x}, {}, o); }
TensorHandle JobBuilder::gelu(TensorHandle x, const OpOptions& o) { return op("gelu", {x}, {}, o); }
TensorHandle JobBuilder::tanh(TensorHandle x, const OpOptions& o) { return op("tanh", {x}, {}, o); }
TensorHandle JobBuilder::sigmoid(TensorHandle x, const OpOptions& o) { return op("sigmoid", {x}, {}, o); }
TensorHandle JobBuilder::softmax(TensorHandle x, const OpOptions& o) { return op("softmax", {x}, {}, o); }
TensorHandle JobBuilder::sparse_softmax_cross_entropy(TensorHandle logits, TensorHandle labels, const OpOptions& o) {
  return op("sparse_softmax_cross_entropy", {logits, labels}, {}, o);
}
TensorHandle JobBuilder::mse_loss(TensorHandle prediction, TensorHandle target, const std::string& reduction,
                                  const OpOptions& o) {
  Attrs attrs;
  if (!reduction.empty()) attrs.set("reduction", reduction);
  return op("mse_loss", {prediction, target}, std::move(attrs), o);
}

namespace {
Attrs reduce_attrs(std::vector<int64_t> axes, bool keepdims) {
  Attrs attrs;
  if (!axes.empty()) attrs.set("axes", std::move(axes));
  if (keepdims) attrs.set("keepdims", int64_t{1});
  return attrs;
}
}  // namespace

TensorHandle JobBuilder::reduce_sum(TensorHandle x, std::vector<int64_t> axes, bool keepdims, const OpOptions& o) {
  return op("reduce_sum", {x}, reduce_attrs(std::move(axes), keepdims), o);
}
TensorHandle JobBuilder::reduce_mean(TensorHandle x, std::vector<int64_t> axes, bool keepdims, const OpOptions& o) {
  return op("reduce_mean", {x}, reduce_attrs(std::move(axes), keepdims), o);
}
TensorHandle JobBuilder::reshape(TensorHandle x, std::vector<int64_t> shape, const OpOptions& o) {
  return op("reshape", {x}, {{"shape", std::move(shape)}}, o);
}
TensorHandle JobBuilder::transpose(TensorHandle x, std::vector<int64_t> perm, const OpOptions& o) {
  return op("transpose", {x}, {{"perm", std::move(perm)}}, o);
}
TensorHandle JobBuilder::identity(TensorHandle x, const OpOptions& o) { return op("identity", {x}, {}, o); }
TensorHandle JobBuilder::slice(TensorHandle x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                               const OpOptions& o) {
  return op("slice", {x}, {{"starts", std::move(starts)}, {"ends", std::move(ends)}}, o);
}
TensorHandle JobBuilder::concat(std::vector<TensorHandle> xs, int64_t axis, const OpOptions& o) {
  return op("concat", std::move(xs), {{"axis", axis}}, o);
}
TensorHandle JobBuilder::accuracy(TensorHandle logits, TensorHandle labels, const OpOptions& o) {
  return op("accuracy", {logits, labels}, {}, o);
}
TensorHandle JobBuilder::scale(TensorHandle x, double factor, const OpOptions& o) {
  return op("scale", {x}, {{"scale", factor}}, o);
}
TensorHandle JobBuilder::all_reduce(TensorHandle x, const std::string& reduce, const OpOptions& o) {
  return op("all_reduce", {x}, {{"reduce", reduce}}, o);
}
TensorHandle JobBuilder::all_gather(TensorHandle x, const OpOptions& o) { return op("all_gather", {x}, {}, o); }
TensorHandle JobBuilder::reduce_scatter(TensorHandle x, const std::string& reduce, const OpOptions& o) {
  return op("reduce_scatter", {x}, {{"reduce", reduce}}, o);
}

void JobBuilder::minimize(TensorHandle loss, graph::Optimizer optimizer) {
  job_.loss = loss.name;
  job_.optimizer = std::move(optimizer);
}

void JobBuilder::metric(const std::string& name, TensorHandle tensor) { job_.metrics.push_back({name, tensor.name}); }
void JobBuilder::fetch(TensorHandle tensor) { job_.fetch.push_back(tensor.name); }

void JobBuilder::train(graph::TrainConfig config) { job_.train = std::move(config); }

void JobBuilder::eval(graph::Eval eval) { job_.eval = std::move(eval); }

void JobBuilder::checkpoint(graph::CheckpointConfig config) { job_.checkpoint = std::move(config); }

StatusOr<graph::Job> JobBuilder::build_checked() const {
  RILL_RETURN_IF_ERROR(graph::check_job(job_).with_context(fmt::format("job '{}'", job_.name)));
  return job_;
}

}  // namespace rill
