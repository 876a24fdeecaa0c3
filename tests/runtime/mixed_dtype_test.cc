// A tensor stored in bf16 or f16 between layers: the MLP samples with one
// layer's matmul output cast to a 16-bit float and back before its readers.
// The plan holds regsts of that dtype; training follows the f32 run within
// the 16-bit rounding; the backward passes through the casts.
#include <doctest/doctest.h>

#include <cmath>

#include "compiler/compiler.h"
#include "runtime/cluster/job_runner.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

// `tensor`'s readers read cast(cast(tensor, dtype), f32).
graph::Job through(graph::Job job, const std::string& tensor, DType dtype) {
  const std::string narrow = tensor + "." + dtype_name(dtype), back = narrow + ".f32";
  std::vector<graph::Op> ops;
  for (graph::Op op : job.ops) {
    for (std::string& in : op.inputs)
      if (in == tensor) in = back;
    const bool makes = std::find(op.outputs.begin(), op.outputs.end(), tensor) != op.outputs.end() || op.name == tensor;
    ops.push_back(op);
    if (makes) {
      graph::Op cast_to{narrow, "cast", {tensor}, {narrow}, {}, {}, {}};
      cast_to.attrs.set("dtype", std::string(dtype_name(dtype)));
      graph::Op cast_back{back, "cast", {narrow}, {back}, {}, {}, {}};
      cast_back.attrs.set("dtype", std::string("f32"));
      ops.push_back(cast_to);
      ops.push_back(cast_back);
    }
  }
  job.ops = std::move(ops);
  return job;
}

// Op `name` (a matmul) multiplies its inputs cast to `dtype`: mixed
// precision for one layer, its f32 output and f32 weight untouched.
graph::Job multiplied_in(graph::Job job, const std::string& name, DType dtype) {
  std::vector<graph::Op> ops;
  for (graph::Op op : job.ops) {
    if (op.name == name) {
      for (std::string& in : op.inputs) {
        const std::string narrow = in + "." + dtype_name(dtype);
        graph::Op cast{narrow, "cast", {in}, {narrow}, {}, {}, {}};
        cast.attrs.set("dtype", std::string(dtype_name(dtype)));
        ops.push_back(cast);
        in = narrow;
      }
    }
    ops.push_back(op);
  }
  job.ops = std::move(ops);
  return job;
}

// The largest relative difference of b's losses from a's.
double worst_relative(const JobResult& a, const JobResult& b) {
  double worst = 0;
  for (size_t i = 0; i < a.loss_curve.size() && i < b.loss_curve.size(); ++i)
    worst = std::max(worst, std::abs(b.loss_curve[i] - a.loss_curve[i]) / std::abs(a.loss_curve[i]));
  return worst;
}

// Runs each MLP sample (one device; tensor parallel) 10 steps as it is and
// as change(job, dtype) makes it, for bf16 and f16 in turn: the losses
// differ by at most the dtype's bound, and by something (the values did
// round). inspect(job, devices, dtype) looks at the changed job first.
template <typename Change, typename Inspect>
void follows_f32(Change change, double bf16_bound, double f16_bound, Inspect inspect) {
  for (const auto& [file, devices] : {std::pair{"samples/mlp/mlp.json", "cpu:1"},
                                      std::pair{"samples/mlp/mlp_model_parallel.json", "cpu:2"}}) {
    CAPTURE(std::string(file));
    graph::Job base = testing::training_sample(file);
    base.train.shuffle = false;
    JobResult f32 = testing::run(base, devices, 10);
    REQUIRE_MESSAGE(f32.status.ok(), f32.status.to_string());
    for (const auto& [dtype, bound] : {std::pair{DType::kBF16, bf16_bound}, std::pair{DType::kF16, f16_bound}}) {
      CAPTURE(std::string(dtype_name(dtype)));
      const graph::Job job = change(base, dtype);
      inspect(job, std::string(devices), dtype);
      JobResult r = testing::run(job, devices, 10);
      REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
      REQUIRE(r.loss_curve.size() == 10);
      const double worst = worst_relative(f32, r);
      MESSAGE(std::string(file) << " " << std::string(dtype_name(dtype)) << ": worst relative loss difference " << worst);
      CHECK(worst <= bound);
      CHECK(worst > 0);
    }
  }
}

}  // namespace

// A matmul of 16-bit inputs: each product is of the rounded values (2^-9
// or 2^-12 relative each), summed in f32; its gradients multiply dC rounded
// alike. Measured as above: at most 6.2e-4 (bf16) and 6.0e-5 (f16) relative
// over 10 steps; asserted at 5e-3 and 1e-3.
TEST_CASE("the MLP with fc2 multiplied in bf16 or f16 (its inputs cast, its output f32) trains near f32") {
  follows_f32([](const graph::Job& job, DType dtype) { return multiplied_in(job, "fc2", dtype); }, 5e-3, 1e-3,
              [](const graph::Job&, const std::string&, DType) {});
}

// The bound: the cast rounds each of fc2's values to 8 (bf16) or 11 (f16)
// significant bits, a relative change of at most 2^-9 or 2^-12 per value;
// the loss is a smooth function of them (relu, a matmul, softmax
// cross-entropy), so one step's loss moves by about that fraction of the
// logits' spread, and 10 SGD steps on the changed gradients compound it
// slowly. Measured (OpenBLAS's default, Zen and Haswell kernels alike): at
// most 2.1e-4 (bf16) and 9.6e-5 (f16) relative over 10 steps; asserted at
// ten times that. A cast that wrote bit patterns as values, or a boxing
// that summed 2-byte elements as 4-byte ones, moves the first loss by far
// more.
TEST_CASE("the MLP with fc2 stored in bf16 or f16: regsts of that dtype, losses near f32's") {
  follows_f32([](const graph::Job& job, DType dtype) { return through(job, "fc2", dtype); }, 2e-3, 1e-3,
              [](const graph::Job& job, const std::string& devices, DType dtype) {
                // The plan holds the 16-bit regsts. (Tensor parallel, SBP
                // deduction boxes fc2 in f32, before the cast: boxing of
                // 16-bit tensors is tested in tests/actor/boxing_test.cc.)
                auto cluster = compiler::parse_devices(devices, 1);
                REQUIRE(cluster.ok());
                auto bytes = compiler::compile(job, *cluster, {});
                REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
                const plan::Plan* plan = plan::GetPlan(bytes->data());
                const plan::DType narrow = dtype == DType::kBF16 ? plan::DType::BF16 : plan::DType::F16;
                int narrow_regsts = 0;
                for (const plan::RegstDesc* r : *plan->regsts())
                  if (r->dtype() == narrow) ++narrow_regsts;
                CHECK(narrow_regsts > 0);
              });
}

// A metric read in its own dtype: the accuracy reported as bf16 is the f32
// accuracy rounded to bf16 (a multiple of 1/256 of the batch is exact: the
// batch is 256 rows), not its bytes read as a float.
TEST_CASE("a metric of bf16 is reported as its value") {
  graph::Job job = testing::training_sample("samples/mlp/mlp.json");
  job.train.shuffle = false;
  graph::Op cast{"acc.bf16", "cast", {"acc"}, {"acc.bf16"}, {}, {}, {}};
  cast.attrs.set("dtype", std::string("bf16"));
  job.ops.push_back(cast);
  job.metrics.push_back({"accuracy16", "acc.bf16"});
  JobResult r = testing::run(job, "cpu:1", 3);
  REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
  REQUIRE(r.train_metrics.count("accuracy16") == 1);
  const double want = BFloat16::from_float(static_cast<float>(r.train_metrics.at("accuracy"))).to_float();
  CHECK(r.train_metrics.at("accuracy16") == want);
  CHECK(r.train_metrics.at("accuracy16") > 0.0);
}

}  // namespace rill
