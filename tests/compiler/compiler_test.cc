// Compiler passes seen through the plans they produce: task structure and
// ids, sources, variables, the sink, autograd, optimizer, pruning, regst
// planning, eval plans and steps. SBP and boxing: sbp_test.cc; plans for
// GPUs: cuda_plan_test.cc; pipelines: pipeline_plan_test.cc.
#include <doctest/doctest.h>

#include <map>

#include <algorithm>

#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using testing::compile_ok;
using testing::computes_of_type;
using testing::plan_of;
using testing::producer;
using testing::regst;
using testing::sbp_string;
using testing::task_named;
using testing::tasks_of_kind;

std::vector<int64_t> ints(const flatbuffers::Vector<int64_t>* v) { return {v->begin(), v->end()}; }

TEST_CASE("parse_devices reads cpu:N and cuda:N (refused with the reason in a build without CUDA), nothing else") {
  auto cpu = compiler::parse_devices("cpu:2", 1);
  REQUIRE(cpu.ok());
  CHECK(cpu->devices_per_node == 2);
  CHECK(cpu->num_nodes == 1);
  CHECK(cpu->device_type == DeviceType::kCpu);
  auto two_nodes = compiler::parse_devices("cpu:4", 3);
  REQUIRE(two_nodes.ok());
  CHECK(two_nodes->parallel() == 12);
  auto cuda = compiler::parse_devices("cuda:4", 3);
#ifdef RILL_WITH_CUDA
  REQUIRE(cuda.ok());
  CHECK(cuda->device_type == DeviceType::kCuda);
  CHECK(cuda->parallel() == 12);
#else
  REQUIRE_FALSE(cuda.ok());
  CHECK(cuda.status().message().find("devices 'cuda:4': this build of Rill has no CUDA support") != std::string::npos);
#endif
  for (const char* bad : {"gpu:1", "cpu", "cpu:0", "cpu:x", "cpu:", "cpu:2x", "cpu:-1", "cpu:999", " cpu:1", ""})
    CHECK_MESSAGE(!compiler::parse_devices(bad, 1).ok(), bad);
  CHECK(!compiler::parse_devices("cpu:1", 0).ok());
}

TEST_CASE("linear regression on cpu:1: one task per op, no boxing") {
  graph::Job job = testing::linear_regression_job();
  std::string bytes = compile_ok(job, "cpu:1");
  const plan::Plan& p = *plan_of(bytes);
  CHECK(p.version() == compiler::kPlanVersion);
  CHECK(p.job_name()->str() == "linear");
  CHECK(p.steps() == 10);
  CHECK(p.global_batch() == 4);
  CHECK(p.num_nodes() == 1);
  CHECK(p.devices_per_node() == 1);
  CHECK(tasks_of_kind(p, plan::TaskKind::Boxing).empty());
  REQUIRE(tasks_of_kind(p, plan::TaskKind::Source).size() == 1);
  REQUIRE(tasks_of_kind(p, plan::TaskKind::Variable).size() == 1);
  REQUIRE(tasks_of_kind(p, plan::TaskKind::Sink).size() == 1);
  CHECK(computes_of_type(p, "mse_loss").size() == 1);
  CHECK(computes_of_type(p, "ones_like").size() == 1);
  CHECK(computes_of_type(p, "mse_loss_grad").size() == 1);
  // Forward matmul plus the one computing w's gradient (x needs none).
  CHECK(computes_of_type(p, "matmul").size() == 2);

  // Ids: the task at position i has index i, its thread key, and its kind's thread type.
  for (uint32_t i = 0; i < p.tasks()->size(); ++i) {
    const plan::Task* t = p.tasks()->Get(i);
    CHECK(ActorId::index(t->id()) == i);
    CHECK(t->thread() == ActorId::thread_key(t->id()));
    CHECK(ActorId::node(t->id()) == 0);
    if (t->kind() == plan::TaskKind::Compute || t->kind() == plan::TaskKind::Variable) {
      CHECK(ActorId::device_type(t->id()) == DeviceType::kCpu);
      CHECK(t->device() == 0);
    } else {
      CHECK(ActorId::device_type(t->id()) == DeviceType::kIo);
      CHECK(t->device() == -1);
    }
  }

  const plan::Task* source = tasks_of_kind(p, plan::TaskKind::Source)[0];
  REQUIRE(source->source() != nullptr);
  CHECK(source->source()->fields()->size() == 2);
  CHECK(source->source()->fields()->Get(0)->str() == "x");
  CHECK(source->source()->fields()->Get(1)->str() == "y");
  CHECK(source->source()->shard() == 0);
  CHECK(source->source()->num_shards() == 1);
  CHECK(source->source()->global_batch() == 4);
  CHECK(source->source()->seed() == 7);
  CHECK(source->source()->shuffle());
  REQUIRE(source->outputs()->size() == 2);
  CHECK(ints(regst(p, source->outputs()->Get(0))->shape()) == std::vector<int64_t>{4, 3});
  CHECK(ints(regst(p, source->outputs()->Get(1))->shape()) == std::vector<int64_t>{4, 1});
  REQUIRE(p.datasets()->size() == 1);
  CHECK(p.datasets()->Get(0)->kind()->str() == "inline");
  CHECK(p.datasets()->Get(0)->tensors()->size() == 2);
  CHECK(p.datasets()->Get(0)->tensors()->Get(0)->f32()->size() == 24);

  const plan::Task* w = tasks_of_kind(p, plan::TaskKind::Variable)[0];
  CHECK(w->name()->str() == "w@0");
  const plan::VariableConf* conf = w->variable();
  REQUIRE(conf != nullptr);
  CHECK(conf->init_op()->str() == "fill");
  CHECK(conf->update_op()->str() == "sgd_update");
  CHECK(conf->num_state() == 0);
  CHECK(ints(conf->offset()) == std::vector<int64_t>{0, 0});
  bool has_shape = false, has_lr = false;
  for (const plan::Attr* a : *conf->init_attrs())
    if (a->name()->str() == "shape") has_shape = ints(a->ints()) == std::vector<int64_t>{3, 1};
  for (const plan::Attr* a : *conf->update_attrs())
    if (a->name()->str() == "lr") has_lr = a->type() == plan::AttrType::Float && a->f() == doctest::Approx(0.01);
  CHECK(has_shape);
  CHECK(has_lr);
  // The variable reads its gradient, which a matmul computes.
  REQUIRE(w->inputs()->size() == 1);
  CHECK(producer(p, w->inputs()->Get(0))->op_type()->str() == "matmul");
  REQUIRE(w->outputs()->size() == 1);
  const plan::RegstDesc* model = regst(p, w->outputs()->Get(0));
  CHECK(model->is_model());
  CHECK(model->register_num() == 1);
  CHECK(ints(model->shape()) == std::vector<int64_t>{3, 1});

  // Every regst: producer writes it, consumers read it, sorted; register counts.
  for (uint32_t i = 0; i < p.regsts()->size(); ++i) {
    const plan::RegstDesc* r = p.regsts()->Get(i);
    CHECK(r->id() == i);
    CHECK(r->register_num() == (testing::one_slot(p, *r) ? 1 : 2));
    const plan::Task* prod = p.tasks()->Get(ActorId::index(r->producer()));
    CHECK(std::count(prod->outputs()->begin(), prod->outputs()->end(), static_cast<int64_t>(i)) == 1);
    std::vector<uint64_t> consumers(r->consumers()->begin(), r->consumers()->end());
    CHECK(std::is_sorted(consumers.begin(), consumers.end()));
    for (uint64_t c : consumers) {
      const plan::Task* t = p.tasks()->Get(ActorId::index(c));
      CHECK(std::count(t->inputs()->begin(), t->inputs()->end(), static_cast<int64_t>(i)) >= 1);
    }
  }

  const plan::Task* sink = tasks_of_kind(p, plan::TaskKind::Sink)[0];
  REQUIRE(sink->inputs()->size() == 1);
  CHECK(sink->sink()->names()->Get(0)->str() == "loss");
  CHECK(producer(p, sink->inputs()->Get(0))->op_type()->str() == "mse_loss");
  // The loss of a split mse_loss is a partial sum; the sink adds its pieces.
  CHECK(sink->sink()->partial()->Get(0) ==
        (sbp_string(regst(p, sink->inputs()->Get(0))->sbp()) == "P"));

  const plan::Task* matmul = task_named(p, "predict@0");
  REQUIRE(matmul != nullptr);
  REQUIRE(matmul->logical_input_shapes()->size() == 2);
  CHECK(ints(matmul->logical_input_shapes()->Get(0)->dims()) == std::vector<int64_t>{4, 3});
  CHECK(ints(matmul->logical_input_shapes()->Get(1)->dims()) == std::vector<int64_t>{3, 1});
  CHECK(producer(p, matmul->inputs()->Get(0))->kind() == plan::TaskKind::Source);
  CHECK(producer(p, matmul->inputs()->Get(1)) == w);
}

TEST_CASE("linear regression on cpu:2: shards, a P->B boxing of w's gradient, register counts") {
  std::string bytes = compile_ok(testing::linear_regression_job(), "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  CHECK(p.devices_per_node() == 2);

  auto sources = tasks_of_kind(p, plan::TaskKind::Source);
  REQUIRE(sources.size() == 2);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(sources[rank]->source()->shard() == rank);
    CHECK(sources[rank]->source()->num_shards() == 2);
    CHECK(ints(regst(p, sources[rank]->outputs()->Get(0))->shape()) == std::vector<int64_t>{2, 3});
    CHECK(ints(regst(p, sources[rank]->outputs()->Get(0))->logical_shape()) == std::vector<int64_t>{4, 3});
    CHECK(sbp_string(regst(p, sources[rank]->outputs()->Get(0))->sbp()) == "S(0)");
  }

  // w's gradient is summed by both device threads, each its half (P ->
  // S(0), one task per device), then gathered into one B (S(0) -> B).
  auto boxings = tasks_of_kind(p, plan::TaskKind::Boxing);
  REQUIRE(boxings.size() == 3);
  const plan::Task* box = nullptr;
  for (const plan::Task* t : boxings) {
    if (t->boxing()->piece() < 0) {
      box = t;
      continue;
    }
    CHECK(ActorId::device_type(t->id()) == DeviceType::kCpu);
    CHECK(t->device() == t->boxing()->piece());
    CHECK(sbp_string(t->boxing()->in_sbp()) == "P");
    CHECK(sbp_string(t->boxing()->out_sbp()) == "S(0)");
    REQUIRE(t->inputs()->size() == 2);
    REQUIRE(t->outputs()->size() == 1);
    CHECK(ints(regst(p, t->outputs()->Get(0))->shape()) == std::vector<int64_t>{t->device() == 0 ? 2 : 1, 1});
  }
  REQUIRE(box != nullptr);
  CHECK(ActorId::device_type(box->id()) == DeviceType::kComm);
  CHECK(box->node() == 0);
  CHECK(box->device() == -1);
  CHECK(sbp_string(box->boxing()->in_sbp()) == "S(0)");
  CHECK(sbp_string(box->boxing()->out_sbp()) == "B");
  CHECK(box->boxing()->parallel() == 2);
  REQUIRE(box->inputs()->size() == 2);
  // One B result, read by the variable task on each rank, and only there.
  REQUIRE(box->outputs()->size() == 1);
  const plan::RegstDesc* out = regst(p, box->outputs()->Get(0));
  CHECK(sbp_string(out->sbp()) == "B");
  CHECK(ints(out->shape()) == std::vector<int64_t>{3, 1});
  REQUIRE(out->consumers()->size() == 2);
  for (int rank = 0; rank < 2; ++rank) {
    const plan::Task* sum = producer(p, box->inputs()->Get(rank));
    CHECK(sum->kind() == plan::TaskKind::Boxing);
    CHECK(sum->boxing()->piece() == rank);
    const plan::Task* grad = producer(p, sum->inputs()->Get(rank));
    CHECK(grad->op_type()->str() == "matmul");
    CHECK(grad->device() == rank);
    CHECK(sbp_string(regst(p, sum->inputs()->Get(rank))->sbp()) == "P");
    const plan::Task* w = task_named(p, "w@" + std::to_string(rank));
    REQUIRE(w != nullptr);
    CHECK(w->device() == rank);
    REQUIRE(w->inputs()->size() == 1);
    CHECK(w->inputs()->Get(0) == box->outputs()->Get(0));
    CHECK(out->consumers()->Get(rank) == w->id());
  }

  // The model one slot, and w's gradient on its way to the update (each
  // piece, and the boxing's sums): step i + 1 makes the next one only after
  // its forward read the model step i's update wrote; what is made after
  // the updates (the forward from the model on) likewise. The rest 2.
  int gradients = 0;
  for (const plan::RegstDesc* r : *p.regsts()) {
    gradients += testing::read_only_by_updates(p, *r);
    CHECK(r->register_num() == (testing::one_slot(p, *r) ? 1 : 2));
  }
  CHECK(gradients == 5);  // 2 pieces of w's gradient, the half each device sums, their gather
  CHECK(std::count_if(p.regsts()->begin(), p.regsts()->end(), [](auto* r) { return r->is_model(); }) == 2);

  const plan::Task* sink = tasks_of_kind(p, plan::TaskKind::Sink)[0];
  CHECK(ActorId::device_type(sink->id()) == DeviceType::kIo);
  REQUIRE(sink->inputs()->size() == 2);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(sink->sink()->names()->Get(rank)->str() == "loss");
    CHECK(sink->sink()->partial()->Get(rank));
    CHECK(producer(p, sink->inputs()->Get(rank))->device() == rank);
  }
}

TEST_CASE("two nodes: rank = node * devices_per_node + device") {
  auto cluster = compiler::parse_devices("cpu:2", 2);
  REQUIRE(cluster.ok());
  auto bytes = compiler::compile(testing::linear_regression_job(8, 4), *cluster, {});
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  REQUIRE(compiler::verify_plan(*bytes).ok());
  const plan::Plan& p = *plan_of(*bytes);
  CHECK(p.num_nodes() == 2);
  auto sources = tasks_of_kind(p, plan::TaskKind::Source);
  auto variables = tasks_of_kind(p, plan::TaskKind::Variable);
  REQUIRE(sources.size() == 4);
  REQUIRE(variables.size() == 4);
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(sources[rank]->node() == rank / 2);
    CHECK(ActorId::node(sources[rank]->id()) == static_cast<uint32_t>(rank / 2));
    // Rows by node, then by device within the node's rows.
    CHECK(sources[rank]->source()->shard() == rank / 2);
    CHECK(sources[rank]->source()->num_shards() == 2);
    CHECK(sources[rank]->source()->sub_shard() == rank % 2);
    CHECK(sources[rank]->source()->num_sub_shards() == 2);
    CHECK(variables[rank]->node() == rank / 2);
    CHECK(variables[rank]->device() == rank % 2);
    CHECK(ActorId::device(variables[rank]->id()) == static_cast<uint32_t>(rank % 2));
  }
  CHECK(tasks_of_kind(p, plan::TaskKind::Sink)[0]->node() == 0);
  // The gradient's boxing: one task per node, each over that node's two pieces.
  auto boxings = tasks_of_kind(p, plan::TaskKind::Boxing);
  REQUIRE(boxings.size() == 2);
  for (int node = 0; node < 2; ++node) {
    CHECK(boxings[node]->node() == node);
    CHECK(boxings[node]->inputs()->size() == 2);
    CHECK(boxings[node]->boxing()->first_rank() == 2 * node);
  }
}

TEST_CASE("eval plans: forward only over the eval dataset, no updates, no shuffle") {
  graph::Job job = testing::mlp_job(8, 4);
  graph::Dataset test_set = testing::mlp_job(10, 4).datasets[0];
  test_set.name = "test";
  job.datasets.push_back(test_set);
  job.eval = graph::Eval{"test", 4};
  compiler::CompileOptions options;
  options.mode = compiler::Mode::kEval;
  std::string bytes = compile_ok(job, "cpu:2", options);
  const plan::Plan& p = *plan_of(bytes);
  CHECK(p.steps() == 2);  // 10 samples, batches of 4, remainder dropped
  CHECK(p.global_batch() == 4);
  REQUIRE(p.datasets()->size() == 1);
  CHECK(p.datasets()->Get(0)->name()->str() == "test");
  for (const plan::Task* s : tasks_of_kind(p, plan::TaskKind::Source)) {
    CHECK(s->source()->dataset() == 0);
    CHECK(!s->source()->shuffle());
  }
  CHECK(computes_of_type(p, "ones_like").empty());
  CHECK(tasks_of_kind(p, plan::TaskKind::Boxing).empty());
  auto variables = tasks_of_kind(p, plan::TaskKind::Variable);
  CHECK(variables.size() == 6);
  for (const plan::Task* v : variables) {
    CHECK(v->inputs()->size() == 0);
    CHECK(v->variable()->update_op()->str().empty());
  }
  const plan::Task* sink = tasks_of_kind(p, plan::TaskKind::Sink)[0];
  CHECK(sink->inputs()->size() == 4);

  job.eval.reset();
  auto cluster = compiler::parse_devices("cpu:1", 1);
  auto missing = compiler::compile(job, *cluster, options);
  REQUIRE(!missing.ok());
  CHECK(missing.status().message().find("eval") != std::string::npos);
}

TEST_CASE("steps: the option overrides, else train.steps, else epochs over the dataset") {
  graph::Job job = testing::linear_regression_job(8, 4);
  job.train.steps = 0;
  job.train.epochs = 3;
  CHECK(plan_of(compile_ok(job, "cpu:1"))->steps() == 6);
  compiler::CompileOptions options;
  options.steps = 5;
  CHECK(plan_of(compile_ok(job, "cpu:1", options))->steps() == 5);
  job.train.steps = 11;
  CHECK(plan_of(compile_ok(job, "cpu:2"))->steps() == 11);
}

TEST_CASE("two uses of a variable: gradient contributions are summed with add") {
  graph::Job job = testing::linear_regression_job();
  job.ops = {job.ops[0], job.ops[0], job.ops[1]};
  job.ops[1].name = "predict2";
  job.ops[1].outputs = {"pred2"};
  job.ops.insert(job.ops.begin() + 2, graph::Op{"sum", "add", {"pred", "pred2"}, {"both"}, {}, {}});
  job.ops[3].inputs = {"both", "y"};
  std::string bytes = compile_ok(job, "cpu:1");
  const plan::Plan& p = *plan_of(bytes);
  CHECK(computes_of_type(p, "add").size() == 2);  // the forward sum and the gradient sum
  const plan::Task* w = tasks_of_kind(p, plan::TaskKind::Variable)[0];
  REQUIRE(w->inputs()->size() == 1);
  const plan::Task* grad = producer(p, w->inputs()->Get(0));
  CHECK(grad->op_type()->str() == "add");
  for (int64_t in : *grad->inputs()) CHECK(producer(p, in)->op_type()->str() == "matmul");
}

TEST_CASE("pruning: what neither the loss nor a metric needs is left out") {
  graph::Job job = testing::linear_regression_job();
  graph::Dataset extra = job.datasets[0];
  extra.name = "unused_data";
  job.datasets.push_back(extra);
  job.inputs.push_back(graph::Input{"z", "unused_data", "x", {3}, DType::kF32, std::nullopt});
  graph::Variable v = job.variables[0];
  v.name = "unused_w";
  job.variables.push_back(v);
  job.ops.push_back(graph::Op{"side", "matmul", {"z", "unused_w"}, {"side_out"}, {}, {}});
  const std::string bytes = compile_ok(job, "cpu:1");
  const plan::Plan& p = *plan_of(bytes);
  CHECK(p.datasets()->size() == 1);
  CHECK(tasks_of_kind(p, plan::TaskKind::Source).size() == 1);
  CHECK(tasks_of_kind(p, plan::TaskKind::Variable).size() == 1);
  CHECK(task_named(p, "side@0") == nullptr);
}

TEST_CASE("activation_register_num sets every non-model regst; below 1 is an error") {
  compiler::CompileOptions options;
  options.activation_register_num = 3;
  const std::string bytes = compile_ok(testing::linear_regression_job(), "cpu:2", options);
  const plan::Plan& p = *plan_of(bytes);
  for (const plan::RegstDesc* r : *p.regsts())
    CHECK(r->register_num() == (testing::one_slot(p, *r) ? 1 : 3));
  options.activation_register_num = 0;
  auto cluster = compiler::parse_devices("cpu:1", 1);
  CHECK(!compiler::compile(testing::linear_regression_job(), *cluster, options).ok());
}

TEST_CASE("a loss reached only through an op without a gradient rule is an error") {
  graph::Job job = testing::mlp_job();
  job.loss = "accuracy";
  job.metrics.clear();
  auto cluster = compiler::parse_devices("cpu:1", 1);
  auto result = compiler::compile(job, *cluster, {});
  REQUIRE(!result.ok());
  CHECK(result.status().message().find("gradient") != std::string::npos);
}

TEST_CASE("micro-batches: sources, computes and the sink act once per micro-batch, updates once a step") {
  graph::Job job = testing::mlp_job(16, 8);
  job.train.micro_batches = 2;
  const std::string bytes = compile_ok(job, "cpu:2", {}, 2);  // and node by node
  const plan::Plan& p = *plan_of(bytes);
  CHECK(p.micro_batches() == 2);
  CHECK(p.global_batch() == 8);
  std::map<std::string, int> accumulates;  // by op type
  for (const plan::Task* t : *p.tasks()) {
    CAPTURE(t->name()->str());
    const std::string op = t->op_type() ? t->op_type()->str() : "";
    switch (t->kind()) {
      case plan::TaskKind::Source:
      case plan::TaskKind::Sink: CHECK(t->acts_per_step() == 2); break;
      case plan::TaskKind::Variable: CHECK(t->acts_per_step() == 1); break;
      case plan::TaskKind::Compute:
        CHECK(t->acts_per_step() == 2);  // every op here reads the batch, or accumulates
        if (regst(p, t->outputs()->Get(0))->readies_per_step() == 1) ++accumulates[op];
        for (int64_t r : *t->inputs())
          if (regst(p, r)->is_model()) CHECK(regst(p, r)->readies_per_step() == 1);  // read by both micro-batches
        break;
      case plan::TaskKind::Boxing:  // the gradients' sums across nodes, once a step, after accumulating
        CHECK(t->acts_per_step() == 1);
        break;
      default: break;
    }
  }
  // The weights' gradient matmuls sum their micro-batches themselves (w1, w2
  // on each of 4 devices); b1's gradient, a reduce_sum, goes through an
  // accumulate op.
  CHECK(accumulates == std::map<std::string, int>{{"accumulate", 4}, {"matmul", 8}});
  // A source reads its shard of a micro-batch: 8 rows / 2 micro-batches / 4 devices.
  const plan::Task* source = tasks_of_kind(p, plan::TaskKind::Source)[0];
  CHECK(regst(p, source->outputs()->Get(0))->shape()->Get(0) == 1);
  CHECK(source->source()->global_batch() == 8);
  CHECK(regst(p, source->outputs()->Get(0))->readies_per_step() == 2);

  auto cluster = compiler::parse_devices("cpu:2", 2);
  REQUIRE(cluster.ok());
  job.train.micro_batches = 3;
  auto uneven = compiler::compile(job, *cluster, {});
  REQUIRE_FALSE(uneven.ok());
  CHECK(uneven.status().message().find("train.micro_batches 3 does not divide train.batch_size 8") !=
        std::string::npos);
  job.train.micro_batches = 4;  // micro-batches of 2 rows over 4 devices
  auto small = compiler::compile(job, *cluster, {});
  REQUIRE_FALSE(small.ok());
  CHECK(small.status().message().find("input 'image': the micro-batch of 2 is smaller than the 4 devices") !=
        std::string::npos);
}

TEST_CASE("variable_pieces: the distinct pieces a checkpoint gathers, replicas once") {
  auto cluster = compiler::parse_devices("cpu:2", 2);
  REQUIRE(cluster.ok());
  graph::Job job = testing::mlp_job();
  auto replicated = compiler::variable_pieces(job, *cluster);
  REQUIRE(replicated.ok());
  std::map<std::string, std::vector<std::vector<int64_t>>> by_name;
  for (const auto& piece : *replicated) by_name[piece.name].push_back(piece.offset);
  CHECK(by_name.size() == 3);  // w1, b1, w2: data parallel, one whole piece each
  CHECK(by_name["w1"] == std::vector<std::vector<int64_t>>{{0, 0}});
  CHECK(by_name["b1"] == std::vector<std::vector<int64_t>>{{0}});
  job.train.zero = true;  // split S(0) over the 4 devices: w1 [4, 8] in rows, b1 [8] in pairs
  auto split = compiler::variable_pieces(job, *cluster);
  REQUIRE(split.ok());
  by_name.clear();
  for (const auto& piece : *split) by_name[piece.name].push_back(piece.offset);
  CHECK(by_name["w1"] == std::vector<std::vector<int64_t>>{{0, 0}, {1, 0}, {2, 0}, {3, 0}});
  CHECK(by_name["b1"] == std::vector<std::vector<int64_t>>{{0}, {2}, {4}, {6}});
  job.ops.clear();  // errors are the compiler's, naming the job
  CHECK_FALSE(compiler::variable_pieces(job, *cluster).ok());
}

}  // namespace
}  // namespace rill
