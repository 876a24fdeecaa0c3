// SBP deduction and boxing seen through compiled plans: data-parallel
// gradients, split variables, hints, and uneven batches.
#include <doctest/doctest.h>

#include <set>

#include "compiler/boxing.h"
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

TEST_CASE("a global batch that does not divide evenly gives balanced pieces") {
  std::string bytes = compile_ok(testing::linear_regression_job(10, 5), "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  auto sources = tasks_of_kind(p, plan::TaskKind::Source);
  REQUIRE(sources.size() == 2);
  CHECK(ints(regst(p, sources[0]->outputs()->Get(0))->shape()) == std::vector<int64_t>{3, 3});
  CHECK(ints(regst(p, sources[1]->outputs()->Get(0))->shape()) == std::vector<int64_t>{2, 3});
  CHECK(regst(p, sources[1]->outputs()->Get(0))->bytes() == 2 * 3 * 4);
  const plan::Task* predict = task_named(p, "predict@0");
  REQUIRE(predict != nullptr);
  CHECK(ints(predict->logical_input_shapes()->Get(0)->dims()) == std::vector<int64_t>{5, 3});
}

TEST_CASE("a split variable: offsets per piece, gradient arrives in its own SBP") {
  graph::Job job = testing::linear_regression_job();
  job.variables[0].sbp = Sbp::split(0);
  std::string bytes = compile_ok(job, "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  const plan::Task* w0 = task_named(p, "w@0");
  const plan::Task* w1 = task_named(p, "w@1");
  REQUIRE(w0 != nullptr);
  REQUIRE(w1 != nullptr);
  CHECK(ints(w0->variable()->offset()) == std::vector<int64_t>{0, 0});
  CHECK(ints(w1->variable()->offset()) == std::vector<int64_t>{2, 0});
  CHECK(ints(regst(p, w0->outputs()->Get(0))->shape()) == std::vector<int64_t>{2, 1});
  CHECK(ints(regst(p, w1->outputs()->Get(0))->shape()) == std::vector<int64_t>{1, 1});
  for (const plan::Task* w : {w0, w1}) {
    REQUIRE(w->inputs()->size() == 1);
    const plan::RegstDesc* grad = regst(p, w->inputs()->Get(0));
    CHECK(sbp_string(grad->sbp()) == "S(0)");
    CHECK(ints(grad->shape()) == ints(regst(p, w->outputs()->Get(0))->shape()));
  }
  // On one device the same job needs no boxing at all.
  CHECK(tasks_of_kind(*plan_of(compile_ok(job, "cpu:1")), plan::TaskKind::Boxing).empty());
}

TEST_CASE("SBP hints: an output hint is honoured, an input hinted B is read whole") {
  graph::Job job = testing::linear_regression_job();
  job.ops[0].output_sbp = {Sbp::broadcast()};
  std::string bytes = compile_ok(job, "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  const plan::Task* predict = task_named(p, "predict@1");
  REQUIRE(predict != nullptr);
  CHECK(sbp_string(regst(p, predict->outputs()->Get(0))->sbp()) == "B");
  // x arrives S(0) from the source, so the matmul reads it through an S(0)->B boxing.
  const plan::Task* feeding = producer(p, predict->inputs()->Get(0));
  CHECK(feeding->kind() == plan::TaskKind::Boxing);
  CHECK(sbp_string(feeding->boxing()->out_sbp()) == "B");

  graph::Job whole = testing::linear_regression_job();
  whole.inputs[0].sbp = Sbp::broadcast();
  whole.inputs[1].sbp = Sbp::broadcast();
  const std::string whole_bytes = compile_ok(whole, "cpu:2");
  const plan::Plan& q = *plan_of(whole_bytes);
  for (const plan::Task* s : tasks_of_kind(q, plan::TaskKind::Source)) {
    CHECK(s->source()->shard() == 0);
    CHECK(s->source()->num_shards() == 1);
    CHECK(ints(regst(q, s->outputs()->Get(0))->shape()) == std::vector<int64_t>{4, 3});
  }

  // Inputs of one dataset in different SBPs: a set of sources each, each
  // reading its own fields (the rows of a step agree: one seeded order).
  graph::Job mixed = testing::linear_regression_job();
  mixed.inputs[0].sbp = Sbp::broadcast();
  const std::string mixed_bytes = compile_ok(mixed, "cpu:2");
  const plan::Plan& m = *plan_of(mixed_bytes);
  auto sources = tasks_of_kind(m, plan::TaskKind::Source);
  REQUIRE(sources.size() == 4);
  for (const plan::Task* s : sources) {
    REQUIRE(s->source()->fields()->size() == 1);
    const bool whole = s->source()->fields()->Get(0)->str() == mixed.inputs[0].field;
    CHECK(s->source()->num_shards() == (whole ? 1 : 2));
  }
  auto cluster = compiler::parse_devices("cpu:2", 1);

  graph::Job impossible = testing::linear_regression_job();
  impossible.ops[1].output_sbp = {Sbp::split(0)};  // mse_loss gives a scalar: never split
  auto result = compiler::compile(impossible, *cluster, {});
  REQUIRE(!result.ok());

  // relu of a partial sum is not a partial sum: P is never legal for its
  // output. The error names the op, the tensor, its hint and what it can be.
  graph::Job no_p = testing::mlp_job();
  no_p.ops[2].output_sbp = {Sbp::partial_sum()};  // act1 (relu) -> a1
  result = compiler::compile(no_p, *cluster, {});
  REQUIRE(!result.ok());
  const std::string& message = result.status().message();
  INFO(message);
  CHECK(message.find("op 'act1' (relu)") != std::string::npos);
  CHECK(message.find("'a1' hinted P (it can be ") != std::string::npos);
  CHECK(message.find("S(0)") != std::string::npos);
}

TEST_CASE("2-D SBP: a hybrid MLP on 2 nodes x 2 devices; the same job on one node; 2-D hints in errors") {
  const Sbp b = Sbp::broadcast(), s0 = Sbp::split(0), s1 = Sbp::split(1);
  graph::Job job = testing::mlp_job(8, 8);
  job.inputs[0].sbp = NdSbp(s0, b);  // batch by node, replicated within
  job.inputs[1].sbp = NdSbp(s0, b);
  job.variables[0].sbp = NdSbp(b, s1);  // w1 [4, 8]: columns by device
  job.variables[1].sbp = NdSbp(b, s0);  // b1 [8]
  std::string bytes = compile_ok(job, "cpu:2", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  // Pieces nest: w1@3 (node 1, device 1) holds columns 4-7, every row.
  const plan::Task* w1 = task_named(p, "w1@3");
  REQUIRE(w1 != nullptr);
  CHECK(ints(w1->variable()->offset()) == std::vector<int64_t>{0, 4});
  CHECK(ints(regst(p, w1->outputs()->Get(0))->shape()) == std::vector<int64_t>{4, 4});
  CHECK(sbp_string(regst(p, w1->outputs()->Get(0))->sbp()) == "(B, S(1))");
  // Sources: rows by node, the same rows on both devices of a node.
  for (const plan::Task* s : tasks_of_kind(p, plan::TaskKind::Source)) {
    CHECK(s->source()->shard() == s->node());
    CHECK(s->source()->num_shards() == 2);
    CHECK(s->source()->num_sub_shards() == 1);
  }
  // Every boxing task is one a task can do (chains are split into them).
  for (const plan::Task* t : tasks_of_kind(p, plan::TaskKind::Boxing))
    CHECK(boxing_form(compiler::read_sbp(t->boxing()->in_sbp()), compiler::read_sbp(t->boxing()->out_sbp()), 2) !=
          BoxingForm::kChain);
  // w1's gradient reaches w1 as (B, S(1)), from partial sums across nodes
  // all-reduced lane by lane: each node sends only its devices' columns.
  CHECK(sbp_string(regst(p, w1->inputs()->Get(0))->sbp()) == "(B, S(1))");
  const plan::Task* grad_box = producer(p, w1->inputs()->Get(0));
  REQUIRE(grad_box->kind() == plan::TaskKind::Boxing);
  CHECK(sbp_string(grad_box->boxing()->in_sbp()) == "(P, S(1))");
  CHECK(compiler::boxing_collective(compiler::read_sbp(grad_box->boxing()->in_sbp()),
                                    compiler::read_sbp(grad_box->boxing()->out_sbp()), 2) == std::string("all_reduce"));

  // On one node the node axis is moot: (S(0), B) inputs are B, w1 is S(1).
  std::string one = compile_ok(job, "cpu:2");
  const plan::Plan& q = *plan_of(one);
  CHECK(sbp_string(regst(q, task_named(q, "w1@1")->outputs()->Get(0))->sbp()) == "S(1)");
  CHECK(tasks_of_kind(q, plan::TaskKind::Source)[0]->source()->num_shards() == 1);

  // An impossible 2-D hint names the 2-D SBPs it could have.
  graph::Job no_p = job;
  no_p.ops[2].output_sbp = {NdSbp(s0, Sbp::partial_sum())};  // act1 (relu) -> a1
  auto cluster = compiler::parse_devices("cpu:2", 2);
  auto result = compiler::compile(no_p, *cluster, {});
  REQUIRE(!result.ok());
  INFO(result.status().message());
  CHECK(result.status().message().find("'a1' hinted (S(0), P) (it can be ") != std::string::npos);
  CHECK(result.status().message().find("(S(0), S(1))") != std::string::npos);
}

TEST_CASE("fetch: the sink reads one whole (B) piece of each fetched tensor") {
  graph::Job job = testing::mlp_job(8, 8);
  job.fetch = {"h1", "w1"};  // h1: S(0), gathered first; w1: B already
  std::string bytes = compile_ok(job, "cpu:2", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  const plan::Task* sink = tasks_of_kind(p, plan::TaskKind::Sink)[0];
  REQUIRE(sink->sink()->fetch() != nullptr);
  REQUIRE(sink->sink()->fetch()->size() == 2);
  const uint32_t reported = sink->sink()->names()->size();
  REQUIRE(sink->inputs()->size() == reported + 2);
  for (uint32_t k = 0; k < 2; ++k) {
    const plan::RegstDesc* r = regst(p, sink->inputs()->Get(reported + k));
    CHECK(r->name()->str() == sink->sink()->fetch()->Get(k)->str());
    CHECK(sbp_string(r->sbp()) == "B");
    CHECK(ints(r->shape()) == ints(r->logical_shape()));
  }
  CHECK(producer(p, sink->inputs()->Get(reported))->kind() == plan::TaskKind::Boxing);
  graph::Job unknown = job;
  unknown.fetch = {"nope"};
  auto cluster = compiler::parse_devices("cpu:2", 1);
  auto result = compiler::compile(unknown, *cluster, {});
  REQUIRE(!result.ok());
  INFO(result.status().to_string());
  CHECK(result.status().message().find("'nope'") != std::string::npos);
}

TEST_CASE("train.zero splits unhinted trainable variables S(0); hinted, frozen and short ones stay") {
  graph::Job job = testing::mlp_job(8, 8);  // w1 [4, 8], b1 [8], w2 [8, 3]
  job.train.zero = true;
  job.variables[2].sbp = Sbp::broadcast();  // w2: hinted
  std::string bytes = compile_ok(job, "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  auto sbp_of = [&](const char* task) { return sbp_string(regst(p, task_named(p, task)->outputs()->Get(0))->sbp()); };
  CHECK(sbp_of("w1@0") == "S(0)");
  CHECK(sbp_of("b1@1") == "S(0)");
  CHECK(sbp_of("w2@0") == "B");
  // w1's gradient: each device sums its rows; nothing gathers it.
  const plan::Task* w1 = task_named(p, "w1@1");
  const plan::Task* sum = producer(p, w1->inputs()->Get(0));
  REQUIRE(sum->kind() == plan::TaskKind::Boxing);
  CHECK(sum->boxing()->piece() == 1);
  CHECK(sum->device() == 1);
  CHECK(sbp_string(sum->boxing()->out_sbp()) == "S(0)");
  // Three devices: w1's 4 rows split 2, 1, 1; b1's 8 rows too.
  std::string three = compile_ok(job, "cpu:3");
  CHECK(sbp_string(regst(*plan_of(three), task_named(*plan_of(three), "w1@2")->outputs()->Get(0))->sbp()) == "S(0)");
  // Five devices: w1 has 4 rows, fewer than the devices: it stays B.
  std::string five = compile_ok(job, "cpu:5");
  CHECK(sbp_string(regst(*plan_of(five), task_named(*plan_of(five), "w1@0")->outputs()->Get(0))->sbp()) == "B");
}

TEST_CASE("MLP on cpu:2: matmuls stay S(0), weight gradients are P and boxed to B") {
  std::string bytes = compile_ok(testing::mlp_job(), "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  for (const char* name : {"fc1@0", "fc1@1", "fc2@0", "fc2@1"}) {
    const plan::Task* t = task_named(p, name);
    REQUIRE_MESSAGE(t != nullptr, name);
    CHECK(sbp_string(regst(p, t->outputs()->Get(0))->sbp()) == "S(0)");
    CHECK(ints(regst(p, t->outputs()->Get(0))->shape())[0] == 2);
  }
  // Each variable gradient goes P -> S(0) (one task per device, each
  // summing its slice) -> B; nothing else needs boxing.
  auto boxings = tasks_of_kind(p, plan::TaskKind::Boxing);
  CHECK(boxings.size() == 9);
  std::set<std::string> boxed;
  for (const plan::Task* box : boxings) {
    if (box->boxing()->piece() >= 0) {
      CHECK(sbp_string(box->boxing()->in_sbp()) == "P");
      CHECK(sbp_string(box->boxing()->out_sbp()) == "S(0)");
      continue;
    }
    CHECK(sbp_string(box->boxing()->in_sbp()) == "S(0)");
    CHECK(sbp_string(box->boxing()->out_sbp()) == "B");
    const plan::Task* consumer = p.tasks()->Get(ActorId::index(regst(p, box->outputs()->Get(0))->consumers()->Get(0)));
    CHECK(consumer->kind() == plan::TaskKind::Variable);
    boxed.insert(consumer->name()->str());
  }
  CHECK(boxed == std::set<std::string>{"w1@0", "b1@0", "w2@0"});
  for (const plan::Task* v : tasks_of_kind(p, plan::TaskKind::Variable)) {
    CHECK(v->variable()->update_op()->str() == "momentum_update");
    CHECK(v->variable()->num_state() == 1);
  }
  // Loss then accuracy, each from both ranks.
  const plan::Task* sink = tasks_of_kind(p, plan::TaskKind::Sink)[0];
  REQUIRE(sink->inputs()->size() == 4);
  CHECK(sink->sink()->names()->Get(0)->str() == "loss");
  CHECK(sink->sink()->names()->Get(1)->str() == "loss");
  CHECK(sink->sink()->names()->Get(2)->str() == "accuracy");
  CHECK(sink->sink()->names()->Get(3)->str() == "accuracy");
  for (uint32_t i = 0; i < 4; ++i)
    CHECK(sink->sink()->partial()->Get(i) ==
          (sbp_string(regst(p, sink->inputs()->Get(i))->sbp()) == "P"));
  // Labels are data: no gradient flows into them.
  CHECK(computes_of_type(p, "sparse_softmax_cross_entropy_grad").size() == 2);
  CHECK(computes_of_type(p, "ones_like").size() == 2);
}

}  // namespace
}  // namespace rill
