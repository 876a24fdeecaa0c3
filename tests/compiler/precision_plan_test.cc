// train.precision's plans: under bf16 and f16 every matmul multiplies 16-bit
// inputs (forward and backward), each tensor cast once per reader group,
// gradients and variables f32; under f16 the loss-scale state variable and
// the gate every update reads; "tf32" turns on TF32 matmuls.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>

#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "graph/job_file.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using testing::gpt_sample;

const plan::RegstDesc& input_regst(const plan::Plan& p, const plan::Task* t, int k) {
  return *testing::regst(p, t->inputs()->Get(static_cast<flatbuffers::uoffset_t>(k)));
}

// Every matmul task of `p` reads two regsts of `dtype` and writes f32.
void every_matmul_in(const plan::Plan& p, plan::DType dtype) {
  const auto matmuls = testing::computes_of_type(p, "matmul");
  REQUIRE(!matmuls.empty());
  for (const plan::Task* t : matmuls) {
    CAPTURE(t->name()->str());
    CHECK(input_regst(p, t, 0).dtype() == dtype);
    CHECK(input_regst(p, t, 1).dtype() == dtype);
    CHECK(testing::regst(p, t->outputs()->Get(0))->dtype() == plan::DType::F32);
  }
}

}  // namespace

TEST_CASE("precision bf16 and f16: every matmul multiplies 16-bit inputs, each tensor cast once") {
  for (const auto& [word, precision, dtype] :
       {std::tuple{"bf16", graph::Precision::kBF16, plan::DType::BF16},
        std::tuple{"f16", graph::Precision::kF16, plan::DType::F16}}) {
    CAPTURE(std::string(word));
    graph::Job job = gpt_sample("gpt_moby.json");
    job.train.precision = precision;
    const std::string bytes = testing::compile_ok(job, "cpu:1");
    const plan::Plan& p = *testing::plan_of(bytes);
    every_matmul_in(p, dtype);  // forward, and the gradients' matmuls
    // h0.ln1 feeds the q, k and v matmuls: one cast; wte feeds the lookup
    // (f32) and the logits (cast): a cast of the weight, its gradient f32.
    std::map<std::string, int> casts;
    for (const plan::Task* t : testing::computes_of_type(p, "cast")) ++casts[t->name()->str()];
    CHECK(casts[fmt::format("h0.ln1.{}@0", word)] == 1);
    CHECK(casts[fmt::format("wte.{}@0", word)] == 1);
    CHECK(casts.count(fmt::format("h0.ln1.{}_1@0", word)) == 0);
    for (const plan::Task* t : testing::tasks_of_kind(p, plan::TaskKind::Variable)) {
      CAPTURE(t->name()->str());
      CHECK(testing::regst(p, t->outputs()->Get(0))->dtype() == plan::DType::F32);
      if (t->inputs() && t->inputs()->size() > 0) CHECK(input_regst(p, t, 0).dtype() == plan::DType::F32);
    }
    // The eval plan multiplies alike.
    auto cluster = compiler::parse_devices("cpu:1", 1);
    REQUIRE(cluster.ok());
    compiler::CompileOptions eval;
    eval.mode = compiler::Mode::kEval;
    eval.steps = 1;  // not counted from the data
    auto eval_bytes = compiler::compile(job, *cluster, eval);
    REQUIRE_MESSAGE(eval_bytes.ok(), eval_bytes.status().to_string());
    every_matmul_in(*testing::plan_of(*eval_bytes), dtype);
  }
}

TEST_CASE("precision bf16 in every GPT layout: tensor parallel, data parallel (f32 buckets), 2-D hybrid") {
  graph::Job tp = gpt_sample("gpt_moby_tp.json");
  tp.train.precision = graph::Precision::kBF16;
  const std::string tp_bytes = testing::compile_ok(tp, "cpu:2");
  every_matmul_in(*testing::plan_of(tp_bytes), plan::DType::BF16);
  graph::Job dp = gpt_sample("gpt_moby.json");
  dp.train.precision = graph::Precision::kBF16;
  const std::string bytes = testing::compile_ok(dp, "cpu:1", {}, 2);
  const plan::Plan& p = *testing::plan_of(bytes);
  every_matmul_in(p, plan::DType::BF16);
  // Gradients are f32: the two buckets per node as in f32, nothing else crosses.
  const auto boxings = testing::tasks_of_kind(p, plan::TaskKind::Boxing);
  CHECK(boxings.size() == 4);
  for (const plan::Task* b : boxings) CHECK(input_regst(p, b, 0).dtype() == plan::DType::F32);
  graph::Job hybrid = gpt_sample("gpt_moby_hybrid.json");
  hybrid.train.precision = graph::Precision::kBF16;
  const std::string hybrid_bytes = testing::compile_ok(hybrid, "cpu:2", {}, 2);
  every_matmul_in(*testing::plan_of(hybrid_bytes), plan::DType::BF16);
}

TEST_CASE("a recomputed layer's casts are recomputed with it") {
  graph::Job job = gpt_sample("gpt_moby.json");
  job.train.precision = graph::Precision::kBF16;
  for (graph::Op& op : job.ops)
    if (op.name.rfind("h1.", 0) == 0) op.recompute = "h.1";
  const std::string bytes = testing::compile_ok(job, "cpu:1");
  const plan::Plan& p = *testing::plan_of(bytes);
  int recomputed_casts = 0;
  for (const plan::Task* t : testing::computes_of_type(p, "cast"))
    recomputed_casts += t->name()->str().rfind("recompute/h1.", 0) == 0;
  // h1.ln1, h1.y, h1.ln2, h1.gelu, the composed attention's h1.q, h1.k,
  // h1.att and h1.v, and the layer's 6 weights.
  CHECK(recomputed_casts == 14);
}

TEST_CASE("precision f16: the loss-scale state, and a gate every update reads") {
  graph::Job job = testing::mlp_job(8, 4);
  job.train.precision = graph::Precision::kF16;
  const std::string bytes = testing::compile_ok(job, "cpu:2");
  const plan::Plan& p = *testing::plan_of(bytes);
  const plan::Task* state = testing::task_named(p, "loss_scale_state@0");
  REQUIRE(state != nullptr);
  CHECK(state->variable()->update_op()->str() == "loss_scale_update");
  int gated = 0;
  for (const plan::Task* t : testing::tasks_of_kind(p, plan::TaskKind::Variable)) {
    if (t == state || t->name()->str().rfind("loss_scale_state", 0) == 0) continue;
    CAPTURE(t->name()->str());
    REQUIRE(t->inputs()->size() == 2);
    const plan::RegstDesc& gate = input_regst(p, t, 1);
    CHECK(gate.dtype() == plan::DType::I32);
    CHECK(gate.shape()->size() == 0);
    ++gated;
  }
  CHECK(gated == 2 * 3);  // w1, b1 and w2 on each of 2 devices
  // bf16 scales nothing unless asked.
  job.train.precision = graph::Precision::kBF16;
  const std::string bf16 = testing::compile_ok(job, "cpu:1");
  CHECK(testing::task_named(*testing::plan_of(bf16), "loss_scale_state@0") == nullptr);
  job.train.loss_scale = 1024;
  const std::string scaled = testing::compile_ok(job, "cpu:1");
  CHECK(testing::task_named(*testing::plan_of(scaled), "loss_scale_state@0") != nullptr);
}

TEST_CASE("precision tf32 is allow_tf32") {
  graph::Job job = testing::mlp_job(8, 4);
  CHECK_FALSE(testing::plan_of(testing::compile_ok(job, "cpu:1"))->allow_tf32());
  job.train.precision = graph::Precision::kTF32;
  const std::string bytes = testing::compile_ok(job, "cpu:1");
  CHECK(testing::plan_of(bytes)->allow_tf32());
  CHECK(testing::computes_of_type(*testing::plan_of(bytes), "cast").empty());
}

// Loss scaling across pipeline stages on 2 nodes: the state lives with the
// loss (the last stage), the check with the first placement's gradients,
// and each node, compiling its own plan, makes what the whole plan cuts
// for it (compile_ok compares them field for field).
TEST_CASE("loss scaling on 2 pipeline stages: every node's own plan is its cut of the whole") {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/samples/mlp/mlp_pipeline.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  job->train.steps = 3;
  job->train.loss_scale = 1024;
  testing::compile_ok(*job, "cpu:2", {}, 2);
}

// With micro-batches the sink reads loss scaling's skipped steps (made once
// a step, after the backward) from the step's first act, so the metrics it
// reads per micro-batch get a slot for each: without them the forward
// waited for the sink and the job stalled. Without a per-step metric they
// keep the usual slots (tests/compiler/pipeline_plan_test.cc).
TEST_CASE("loss scaling with 4 micro-batches: the sink's per-micro-batch metrics hold a whole step") {
  graph::Job job = testing::mlp_job(64, 64);
  job.train.micro_batches = 4;
  job.train.loss_scale = 1024;
  const std::string bytes = testing::compile_ok(job, "cpu:2");
  const plan::Plan& p = *testing::plan_of(bytes);
  int metrics = 0;
  for (const plan::Task* sink : testing::tasks_of_kind(p, plan::TaskKind::Sink))
    for (int64_t id : *sink->inputs()) {
      const plan::RegstDesc* r = testing::regst(p, id);
      if (r->name()->str() == "loss" || r->name()->str() == "accuracy") {
        CHECK(r->register_num() == 4);
        ++metrics;
      }
    }
  CHECK(metrics == 4);  // the loss and the accuracy from each of 2 devices
}

// Op fusion (compiler/fusion.h): each layer's bias_add + gelu_tanh of the
// GPT sample is one bias_gelu_tanh op, tensor parallel too (x split by
// columns, b with it); a sum something else reads (a fetch) stays apart.
TEST_CASE("bias_add then gelu_tanh is one bias_gelu_tanh op where nothing else reads the sum") {
  for (const auto& [file, devices, tasks] :
       {std::tuple{"gpt_moby.json", "cpu:1", 4}, std::tuple{"gpt_moby_tp.json", "cpu:2", 8}}) {  // 4 layers a device
    CAPTURE(std::string(file));
    graph::Job job = gpt_sample(file);
    const std::string bytes = testing::compile_ok(job, devices);
    const plan::Plan& p = *testing::plan_of(bytes);
    CHECK(testing::computes_of_type(p, "gelu_tanh").empty());
    const auto fused = testing::computes_of_type(p, "bias_gelu_tanh");
    CHECK(fused.size() == static_cast<size_t>(tasks));
    for (const plan::Task* t : fused) CHECK(t->name()->str().find(".gelu@") != std::string::npos);
    if (std::string(devices) == "cpu:2")
      for (const plan::Task* t : fused) CHECK(testing::sbp_string(input_regst(p, t, 0).sbp()) == "S(2)");
    job.fetch = {"h1.fc"};
    const std::string fetched = testing::compile_ok(job, devices);
    CHECK(testing::computes_of_type(*testing::plan_of(fetched), "bias_gelu_tanh").size() == fused.size() * 3 / 4);
  }
}

}  // namespace rill
