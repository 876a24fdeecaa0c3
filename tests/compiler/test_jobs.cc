#include "tests/compiler/test_jobs.h"

#include <flatbuffers/idl.h>

#include <cstdlib>
#include <set>

#include "compiler/plan_bfbs_generated.h"
#include "graph/job_file.h"

#include <doctest/doctest.h>

namespace rill::testing {

namespace {

graph::Input input(const std::string& name, const std::string& dataset, Shape shape, DType dtype = DType::kF32) {
  graph::Input in;
  in.name = name;
  in.dataset = dataset;
  in.field = name;
  in.shape = std::move(shape);
  in.dtype = dtype;
  return in;
}

graph::Variable variable(const std::string& name, Shape shape) {
  graph::Variable v;
  v.name = name;
  v.shape = std::move(shape);
  v.init.type = "uniform";
  v.init.attrs.set("low", -0.1);
  v.init.attrs.set("high", 0.1);
  return v;
}

graph::Op op(const std::string& name, const std::string& type, std::vector<std::string> inputs,
             std::vector<std::string> outputs, Attrs attrs = {}) {
  graph::Op o;
  o.name = name;
  o.type = type;
  o.inputs = std::move(inputs);
  o.outputs = std::move(outputs);
  o.attrs = std::move(attrs);
  return o;
}

InlineTensor inline_f32(const std::string& name, Shape shape) {
  InlineTensor t;
  t.name = name;
  t.shape = shape;
  for (int64_t i = 0; i < num_elements(shape); ++i) t.f32.push_back(static_cast<float>(i % 7) * 0.25f);
  return t;
}

}  // namespace

graph::Job linear_regression_job(int64_t num_samples, int64_t batch) {
  graph::Job job;
  job.name = "linear";
  graph::Dataset data;
  data.name = "points";
  data.kind = "inline";
  data.tensors = {inline_f32("x", {num_samples, 3}), inline_f32("y", {num_samples, 1})};
  job.datasets.push_back(data);
  job.inputs = {input("x", "points", {3}), input("y", "points", {1})};
  job.variables = {variable("w", {3, 1})};
  job.variables[0].init.type = "fill";
  job.variables[0].init.attrs = Attrs{{"value", 0.0}};
  job.ops = {op("predict", "matmul", {"x", "w"}, {"pred"}),
             op("mse", "mse_loss", {"pred", "y"}, {"loss"}, Attrs{{"reduction", std::string("mean")}})};
  job.loss = "loss";
  job.train.batch_size = batch;
  job.train.steps = 10;
  job.train.seed = 7;
  return job;
}

graph::Job mlp_job(int64_t num_samples, int64_t batch) {
  graph::Job job;
  job.name = "mlp";
  graph::Dataset data;
  data.name = "digits";
  data.kind = "inline";
  InlineTensor labels;
  labels.name = "label";
  labels.shape = {num_samples};
  labels.dtype = DType::kI32;
  for (int64_t i = 0; i < num_samples; ++i) labels.i32.push_back(static_cast<int32_t>(i % 3));
  data.tensors = {inline_f32("image", {num_samples, 4}), labels};
  job.datasets.push_back(data);
  job.inputs = {input("image", "digits", {4}), input("label", "digits", {}, DType::kI32)};
  job.variables = {variable("w1", {4, 8}), variable("b1", {8}), variable("w2", {8, 3})};
  job.ops = {op("fc1", "matmul", {"image", "w1"}, {"h1"}),
             op("bias1", "bias_add", {"h1", "b1"}, {"h1b"}),
             op("act1", "relu", {"h1b"}, {"a1"}),
             op("fc2", "matmul", {"a1", "w2"}, {"logits"}),
             op("xent", "sparse_softmax_cross_entropy", {"logits", "label"}, {"losses"}),
             op("mean", "reduce_mean", {"losses"}, {"loss"}, Attrs{{"axes", std::vector<int64_t>{0}}}),
             op("acc", "accuracy", {"logits", "label"}, {"accuracy"})};
  job.loss = "loss";
  job.metrics = {{"accuracy", "accuracy"}};
  job.optimizer.type = "momentum";
  job.train.batch_size = batch;
  job.train.steps = 5;
  job.eval = graph::Eval{"digits", 4};
  return job;
}

graph::Job deep_mlp_job(int layers, int64_t num_samples, int64_t batch) {
  graph::Job job = mlp_job(num_samples, batch);
  job.variables.clear();
  std::vector<graph::Op> ops;
  std::string x = "image";
  int64_t width = 4;
  for (int l = 0; l < layers; ++l) {
    const std::string n = std::to_string(l);
    job.variables.push_back(variable("w" + n, {width, 8}));
    job.variables.push_back(variable("b" + n, {8}));
    ops.push_back(op("fc" + n, "matmul", {x, "w" + n}, {"h" + n}));
    ops.push_back(op("bias" + n, "bias_add", {"h" + n, "b" + n}, {"hb" + n}));
    ops.push_back(op("act" + n, "relu", {"hb" + n}, {"a" + n}));
    x = "a" + n;
    width = 8;
  }
  job.variables.push_back(variable("w_out", {width, 3}));
  ops.push_back(op("fc_out", "matmul", {x, "w_out"}, {"logits"}));
  for (const graph::Op& o : job.ops)
    if (o.type == "sparse_softmax_cross_entropy" || o.type == "reduce_mean" || o.type == "accuracy") ops.push_back(o);
  job.ops = ops;
  return job;
}

graph::Job identity_chain_job(int ops, int branches) {
  graph::Job job = mlp_job(8, 4);
  job.variables = {variable("w1", {4, 8})};
  std::vector<graph::Op> chain = {op("fc1", "matmul", {"image", "w1"}, {"h"})};
  std::string x = "h";
  for (int block = 0; static_cast<int>(chain.size()) < ops + 1; ++block) {
    const std::string n = std::to_string(block);
    if (branches <= 1) {
      chain.push_back(op("id" + n, "identity", {x}, {"id" + n}));
      x = "id" + n;
      continue;
    }
    for (int k = 0; k < branches; ++k)
      chain.push_back(op("b" + n + "_" + std::to_string(k), "identity", {x}, {"b" + n + "_" + std::to_string(k)}));
    x = "b" + n + "_0";
    for (int k = 1; k < branches; ++k) {
      const std::string sum = "b" + n + "_sum" + std::to_string(k);
      chain.push_back(op(sum, "add", {x, "b" + n + "_" + std::to_string(k)}, {sum}));
      x = sum;
    }
  }
  for (graph::Op o : job.ops)
    if (o.type == "sparse_softmax_cross_entropy" || o.type == "reduce_mean" || o.type == "accuracy") {
      if (o.inputs[0] == "logits") o.inputs[0] = x;  // 8 classes for labels 0 to 2
      chain.push_back(o);
    }
  job.ops = chain;
  return job;
}

graph::Job gpt_sample(const std::string& file) {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/samples/gpt/" + file);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

std::string compile_ok(const graph::Job& job, const std::string& devices, const compiler::CompileOptions& options,
                       int num_nodes) {
  auto cluster = compiler::parse_devices(devices, num_nodes);
  REQUIRE_MESSAGE(cluster.ok(), cluster.status().to_string());
  auto bytes = compiler::compile(job, *cluster, options);
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  auto verified = compiler::verify_plan(*bytes);
  REQUIRE_MESSAGE(verified.ok(), verified.status().to_string());
  if (options.node < 0 && num_nodes > 1) check_nodes_compile_alone(job, *cluster, options, *bytes);
  return *bytes;
}

std::string plan_text(const std::string& bytes) {
  flatbuffers::Parser parser;
  REQUIRE(parser.Deserialize(plan::PlanBinarySchema::data(), plan::PlanBinarySchema::size()));
  std::string text;
  REQUIRE(flatbuffers::GenerateText(parser, bytes.data(), &text));
  return text;
}

void check_nodes_compile_alone(const graph::Job& job, const compiler::Cluster& cluster,
                               const compiler::CompileOptions& options, const std::string& whole) {
  for (int node = 0; node < cluster.num_nodes; ++node) {
    CAPTURE(node);
    compiler::CompileOptions alone = options;
    alone.node = node;
    auto own = compiler::compile(job, cluster, alone);
    REQUIRE_MESSAGE(own.ok(), own.status().to_string());
    REQUIRE_MESSAGE(compiler::verify_plan(*own).ok(), compiler::verify_plan(*own).status().to_string());
    auto cut = compiler::node_plan(whole, node);
    REQUIRE_MESSAGE(cut.ok(), cut.status().to_string());
    if (cluster.device_type != DeviceType::kCpu) continue;  // Copy ids are per node (compiler.h)
    const std::string own_text = plan_text(*own), cut_text = plan_text(*cut);
    CHECK_MESSAGE(own_text == cut_text, "the plan node ", node, " compiles differs from the one cut from the whole");
  }
}

const plan::Plan* plan_of(const std::string& bytes) { return plan::GetPlan(bytes.data()); }

bool read_only_by_updates(const plan::Plan& p, const plan::RegstDesc& r) {
  if (r.consumers() == nullptr || r.consumers()->size() == 0) return false;
  for (uint64_t c : *r.consumers()) {
    const plan::Task* t = compiler::find_task(p, c);
    if (t == nullptr || ActorId::node(c) != ActorId::node(r.producer())) return false;
    if (t->kind() == plan::TaskKind::Variable) continue;
    if (t->kind() != plan::TaskKind::Boxing) return false;
    for (int64_t out : *t->outputs())
      if (!read_only_by_updates(p, *compiler::find_regst(p, out))) return false;
  }
  return true;
}

namespace {

bool acts_after_updates(const plan::Plan& p, const plan::Task& t, std::set<uint64_t>* seen) {
  if (!seen->insert(t.id()).second) return false;
  for (int64_t in : *t.inputs()) {
    const plan::RegstDesc* r = compiler::find_regst(p, in);
    const plan::Task* producer = r == nullptr ? nullptr : compiler::find_task(p, r->producer());
    if (producer == nullptr || ActorId::node(producer->id()) != ActorId::node(t.id())) continue;
    if (producer->kind() == plan::TaskKind::Variable) {
      if (r->is_model() && producer->inputs() != nullptr && producer->inputs()->size() > 0) return true;
    } else if (acts_after_updates(p, *producer, seen)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool one_slot(const plan::Plan& p, const plan::RegstDesc& r) {
  if (r.is_model() || read_only_by_updates(p, r)) return true;
  if (r.readies_per_step() > 1 || r.name()->str().rfind("ctrl:", 0) == 0) return false;
  const plan::Task* producer = compiler::find_task(p, r.producer());
  if (producer == nullptr || producer->kind() == plan::TaskKind::Variable) return false;
  std::set<uint64_t> seen;
  return acts_after_updates(p, *producer, &seen);
}

std::vector<const plan::Task*> tasks_of_kind(const plan::Plan& plan, plan::TaskKind kind) {
  std::vector<const plan::Task*> out;
  for (const plan::Task* t : *plan.tasks())
    if (t->kind() == kind) out.push_back(t);
  return out;
}

std::vector<const plan::Task*> computes_of_type(const plan::Plan& plan, const std::string& op_type) {
  std::vector<const plan::Task*> out;
  for (const plan::Task* t : *plan.tasks())
    if (t->kind() == plan::TaskKind::Compute && t->op_type()->str() == op_type) out.push_back(t);
  return out;
}

const plan::Task* task_named(const plan::Plan& plan, const std::string& name) {
  for (const plan::Task* t : *plan.tasks())
    if (t->name()->str() == name) return t;
  return nullptr;
}

const plan::RegstDesc* regst(const plan::Plan& plan, int64_t id) {
  const plan::RegstDesc* r = compiler::find_regst(plan, id);
  REQUIRE_MESSAGE(r != nullptr, "regst ", id, " is not in the plan");
  return r;
}

const plan::Task* task(const plan::Plan& plan, uint64_t id) {
  const plan::Task* t = compiler::find_task(plan, id);
  REQUIRE_MESSAGE(t != nullptr, "task ", ActorId::to_string(id), " is not in the plan");
  return t;
}

const plan::Task* producer(const plan::Plan& plan, int64_t regst_id) {
  return task(plan, regst(plan, regst_id)->producer());
}

std::string sbp_string(const plan::NdSbp* sbp) {
  REQUIRE(sbp != nullptr);
  return compiler::read_sbp(sbp).to_string();
}

}  // namespace rill::testing
