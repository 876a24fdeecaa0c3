// Jobs on GPUs, end to end: the same plans as on CPUs, with tasks on cuda
// devices. Without a GPU (CI has none) the suite reports itself skipped
// (exit 77) with the reason, instead of passing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernels/cuda/cuda_context.h"
#include "runtime/cluster/job_runner.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
using testing::load_sample;
using testing::run;

// The bound of numerics_test.cc holds for any correct float implementation,
// cuBLAS's summation orders and CUDA's expf/logf included.
TEST_CASE("one step on cuda:1, and on 2 nodes x cuda:1, gives the exact gradients within float error bounds") {
  testing::Problem problem = testing::make_problem();
  testing::Reference ref = testing::reference(problem.x, problem.y, problem.weights);
  testing::check_one_step(problem, ref, 1, "cuda:1");
  testing::check_one_step(problem, ref, 2, "cuda:1");  // two nodes in-process, one GPU shared
}

TEST_CASE("linear regression on cuda:1 converges to w = [2, 3]") {
  JobResult result = run(load_sample("samples/linear_regression/linear_regression.json"), "cuda:1");
  REQUIRE_MESSAGE(result.status.ok(), result.status.to_string());
  const auto& w = result.variables.at("w").values;
  REQUIRE(w.size() == 2);
  CHECK(std::abs(w[0] - 2.0f) < 1e-3);  // converged least squares: see runtime_test.cc
  CHECK(std::abs(w[1] - 3.0f) < 1e-3);
}

// Same bound and reasons as "data parallelism changes nothing but speed" in
// runtime_test.cc: step 0 differs only by summation order (cuBLAS against
// OpenBLAS; measured 1.0e-7 relative on an H100), and the first 10 steps stay
// within 1.1e-7 of the CPU's, far below a wrong gradient's effect.
TEST_CASE("the MLP on cuda:1 follows cpu:1's loss curve over 10 steps, and reaches 84% in 2 epochs") {
  graph::Job job = load_sample("samples/mlp/mlp.json");
  JobResult gpu = run(job, "cuda:1");
  REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
  CHECK(gpu.eval_samples == 10000);
  CHECK(gpu.eval_metrics.at("accuracy") >= 0.84);
  job.eval.reset();
  JobResult cpu = run(job, "cpu:1", 10);
  REQUIRE_MESSAGE(cpu.status.ok(), cpu.status.to_string());
  REQUIRE(gpu.loss_curve.size() >= 10);
  for (size_t i = 0; i < 10; ++i) {
    CAPTURE(i);
    CHECK(std::abs(gpu.loss_curve[i] - cpu.loss_curve[i]) <= 1e-5 * std::abs(cpu.loss_curve[i]));
  }
}

// The GPU's kernels are deterministic (cuBLAS for a fixed shape, reductions
// without atomics), so a resumed run is bitwise the straight one, as on CPUs.
TEST_CASE("a checkpoint taken on cuda:1 resumes there bitwise, with Adam's state") {
  auto dir = std::filesystem::temp_directory_path() / ("rill-cuda-resume-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  graph::Job job = load_sample("samples/mlp/mlp.json");
  job.eval.reset();
  job.optimizer.type = "adam";
  job.optimizer.lr = 1e-3;
  job.checkpoint.dir = (dir / "straight").string();
  job.checkpoint.every = 30;
  JobResult straight = run(job, "cuda:1", 60);
  REQUIRE_MESSAGE(straight.status.ok(), straight.status.to_string());
  job.checkpoint.dir = (dir / "resumed").string();
  JobRunOptions options;
  options.devices = "cuda:1";
  options.steps = 60;
  options.out = nullptr;
  options.resume = (dir / "straight" / "step-00000030").string();
  JobResult resumed = run_job(job, options);
  REQUIRE_MESSAGE(resumed.status.ok(), resumed.status.to_string());
  REQUIRE(resumed.loss_curve.size() == 30);
  for (size_t i = 0; i < 30; ++i) {
    CAPTURE(i);
    CHECK(resumed.loss_curve[i] == straight.loss_curve[30 + i]);
  }
  for (const auto& [name, value] : straight.variables) {
    CAPTURE(name);
    CHECK(resumed.variables.at(name).values == value.values);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("asking for more GPUs than the node has is an error naming them") {
  const int count = cuda_device_count();
  JobResult result = run(load_sample("samples/linear_regression/linear_regression.json"),
                         "cuda:" + std::to_string(count + 1));
  REQUIRE_FALSE(result.status.ok());
  INFO(result.status.message());
  CHECK(result.status.message().find("cuda:" + std::to_string(count + 1)) != std::string::npos);
  CHECK(result.status.message().find("has " + std::to_string(count) + " CUDA device(s)") != std::string::npos);
}

}  // namespace rill

int main(int argc, char** argv) {
  if (rill::cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device here (GPU jobs are tested where a GPU is present)\n");
    return 77;  // meson's "skipped"
  }
  doctest::Context context(argc, argv);
  return context.run();
}
