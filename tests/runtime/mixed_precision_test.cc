// train.precision bf16 and f16 (automatic mixed precision) and dynamic loss
// scaling, trained on CPU devices: the GPT sample's 200-step curve follows
// f32's; a forced overflow is skipped and counted and training goes on; a
// skipped step changes no variable; a scale below 1 stops the job naming
// the step; scaling an f32 job by a power of two changes no loss; a
// checkpoint resumes the scale's state bitwise.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

graph::Job gpt_sample() {
  graph::Job job = testing::training_sample("samples/gpt/gpt_moby.json");
  job.train.shuffle = false;
  return job;
}

graph::Job mlp_sample() {
  graph::Job job = testing::training_sample("samples/mlp/mlp.json");
  job.train.shuffle = false;
  return job;
}

// The mean over windows of `window` steps: the curve a user plots.
std::vector<double> smoothed(const std::vector<double>& curve, size_t window) {
  std::vector<double> out;
  for (size_t i = 0; i + window <= curve.size(); i += window) {
    double sum = 0;
    for (size_t k = i; k < i + window; ++k) sum += curve[k];
    out.push_back(sum / static_cast<double>(window));
  }
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) return false;
  return true;
}

}  // namespace

// 200 AdamW steps of the GPT sample (batch 4, the schedule's warmup and
// clipping as written) in f32, bf16 and f16. Each 16-bit matmul rounds its
// inputs to 8 (bf16) or 11 (f16) significant bits, 2^-9 or 2^-12 relative
// per value; products sum in f32. That moves each step's gradients by about
// that fraction, and the trajectories part slowly (AdamW normalizes step
// sizes, so a relative change in a gradient is at most that change in the
// step), which shows step by step as noise, not as a different curve: the
// mean loss over each 20 steps (what a user plots) stays close. Measured
// here (OpenBLAS's Haswell, Zen and SkylakeX kernels): bf16 at most 0.0096
// absolute in a window mean (0.4% of the last window's 2.48), f16 0.0017;
// asserted within 0.05 (bf16) and 0.02 (f16). Training diverging, or a
// gradient lost in a cast, moves a window mean by more than 0.1 within 200
// steps; both curves must also have fallen by a third from the start.
TEST_CASE("GPT sample, 200 steps: bf16 and f16 follow the f32 curve") {
  graph::Job base = gpt_sample();
  base.train.batch_size = 4;
  JobResult f32 = testing::run(base, "cpu:1", 200);
  REQUIRE_MESSAGE(f32.status.ok(), f32.status.to_string());
  REQUIRE(f32.loss_curve.size() == 200);
  const std::vector<double> want = smoothed(f32.loss_curve, 20);
  for (const auto& [precision, bound] :
       {std::pair{graph::Precision::kBF16, 0.05}, std::pair{graph::Precision::kF16, 0.02}}) {
    CAPTURE(std::string(graph::to_string(precision)));
    graph::Job job = base;
    job.train.precision = precision;
    JobResult r = testing::run(job, "cpu:1", 200);
    REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
    REQUIRE(r.loss_curve.size() == 200);
    const std::vector<double> got = smoothed(r.loss_curve, 20);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    MESSAGE(graph::to_string(precision) << ": worst window-mean difference " << worst << ", last window "
                                        << got.back() << " vs " << want.back());
    CHECK(worst <= bound);
    CHECK(worst > 0);  // it did multiply in 16 bits
    CHECK(got.back() < got.front() * 2 / 3);
    if (precision == graph::Precision::kF16) {
      // The sample's gradients never overflow at 65536: no step skipped.
      CHECK(r.train_metrics.at("skipped_steps") == 0);
      CHECK(r.train_metrics.at("loss_scale") == 65536);
    }
  }
}

// A first scale of 2^40 overflows f16 (its largest value is 65504) in the
// cast of every matmul's output gradient: those steps are skipped, each
// halving the scale, until one fits; then training goes on. Every halving
// is counted: the scale of the last step is exactly 2^(40 - skipped) (the
// window of 2000 good steps never ends in 60).
TEST_CASE("f16 with an overflowing loss scale: steps skipped and counted, the scale halved, training goes on") {
  graph::Job job = mlp_sample();
  job.train.precision = graph::Precision::kF16;
  job.train.loss_scale = std::ldexp(1.0, 40);
  JobResult r = testing::run(job, "cpu:2", 60);
  REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
  const double skipped = r.train_metrics.at("skipped_steps");
  MESSAGE("skipped " << skipped << ", last scale " << r.train_metrics.at("loss_scale"));
  CHECK(skipped >= 10);  // 2^30 still overflows: a gradient above 6e-5
  CHECK(skipped <= 35);
  CHECK(r.train_metrics.at("loss_scale") == std::ldexp(1.0, 40 - static_cast<int>(skipped)));
  for (double loss : r.loss_curve) CHECK(std::isfinite(loss));
  CHECK(r.final_loss < r.loss_curve.front() * 0.6);
}

// Three steps that all overflow (2^60, 2^59, 2^58): no update happens, so
// the variables are bitwise the values the first step read (fetched from a
// one-step f32 run: the model at step 0). Momentum's buffer stays zero too,
// else the first applied step would move further.
TEST_CASE("a skipped step changes no variable") {
  graph::Job job = mlp_sample();
  job.fetch = {"w1", "w2"};
  JobResult start = testing::run(job, "cpu:1", 1);
  REQUIRE_MESSAGE(start.status.ok(), start.status.to_string());
  job.train.precision = graph::Precision::kF16;
  job.train.loss_scale = std::ldexp(1.0, 60);
  JobResult r = testing::run(job, "cpu:1", 3);
  REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
  CHECK(r.train_metrics.at("skipped_steps") == 3);
  CHECK(r.train_metrics.at("loss_scale") == std::ldexp(1.0, 58));
  for (const char* w : {"w1", "w2"}) {
    CAPTURE(std::string(w));
    CHECK(r.variables.at(w).values == start.fetched.at(w).values);
  }
}

// Linear regression on targets of 10^6: the loss (f32, about 10^12) is
// finite, but d loss / d pred is about 10^5 per sample, beyond f16's 65504
// at any scale of 1 or more, so every step overflows: from 4, the scale
// falls to 2, 1, then below 1 at step 2, and the job stops there, naming it.
TEST_CASE("a loss scale that would fall below 1 stops the job, naming the step") {
  graph::Job job = testing::huge_targets_job();
  job.train.loss_scale = 4;
  JobResult r = testing::run(job, "cpu:1", 10);
  REQUIRE_FALSE(r.status.ok());
  INFO(r.status.to_string());
  CHECK(r.status.message().find("the loss scale fell below 1 at step 2") != std::string::npos);
}

// Multiplying by a power of two is exact in float arithmetic (no value here
// comes near the under- or overflow thresholds), and every backward op is
// linear in the loss's gradient, so an f32 job scaled by 1024 and unscaled
// before its updates computes the same gradients bit for bit: the same
// losses, on one device and tensor parallel, with clipping (the GPT
// sample's norm is the unscaled one) and without.
TEST_CASE("an f32 job with a loss scale trains bit for bit as without one" * doctest::test_suite("blas_independent")) {
  for (const auto& [file, devices, steps] : {std::tuple{"samples/mlp/mlp.json", "cpu:1", 10},
                                             std::tuple{"samples/mlp/mlp_model_parallel.json", "cpu:2", 10},
                                             std::tuple{"samples/gpt/gpt_moby.json", "cpu:1", 5}}) {
    CAPTURE(std::string(file));
    graph::Job job = testing::training_sample(file);
    job.train.shuffle = false;
    if (job.train.batch_size > 64 && std::string(file).find("gpt") != std::string::npos) job.train.batch_size = 4;
    JobResult plain = testing::run(job, devices, steps);
    REQUIRE_MESSAGE(plain.status.ok(), plain.status.to_string());
    job.train.loss_scale = 1024;
    JobResult scaled = testing::run(job, devices, steps);
    REQUIRE_MESSAGE(scaled.status.ok(), scaled.status.to_string());
    CHECK(scaled.train_metrics.at("loss_scale") == 1024);
    CHECK(same_bits(plain.loss_curve, scaled.loss_curve));
    for (const auto& [name, value] : plain.variables)
      if (name != "loss_scale_state") CHECK(value.values == scaled.variables.at(name).values);
  }
}

// With micro-batches the sink reads each micro-batch's loss (and fetched
// tensors) and, from the step's first act on, the skipped steps made after
// the step's backward: what it reads per micro-batch holds a whole step
// (regst planning), else the forward waits for the sink and the sink for
// the backward. An exact scale changes
// nothing; an overflowing one is skipped and counted as without them.
TEST_CASE("loss scaling with 4 micro-batches: an exact scale changes nothing, overflows are skipped") {
  graph::Job job = mlp_sample();
  job.train.micro_batches = 4;
  JobResult plain = testing::run(job, "cpu:2", 10);
  REQUIRE_MESSAGE(plain.status.ok(), plain.status.to_string());
  job.train.loss_scale = 1024;
  JobResult scaled = testing::run(job, "cpu:2", 10);
  REQUIRE_MESSAGE(scaled.status.ok(), scaled.status.to_string());
  CHECK(same_bits(plain.loss_curve, scaled.loss_curve));
  job.train.precision = graph::Precision::kF16;
  job.train.loss_scale = std::ldexp(1.0, 40);
  job.fetch = {"logits"};  // a fetched activation is read per micro-batch too
  JobResult r = testing::run(job, "cpu:2", 40);
  REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
  const double skipped = r.train_metrics.at("skipped_steps");
  CHECK(skipped >= 10);
  CHECK(skipped <= 35);
  CHECK(r.train_metrics.at("loss_scale") == std::ldexp(1.0, 40 - static_cast<int>(skipped)));
}

// The scale's state is a variable: saved at step 6 (two overflows then
// four good steps, a window of 3 doubling once), resumed, and the rest of
// the run is bitwise the uninterrupted one, scale and skipped steps too.
TEST_CASE("a checkpoint resumes loss scaling's state bit for bit") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("rill_loss_scale_ckpt_{}", ::getpid());
  std::filesystem::remove_all(dir);
  graph::Job job = mlp_sample();
  job.train.precision = graph::Precision::kF16;
  job.train.loss_scale = std::ldexp(1.0, 26);
  job.train.loss_scale_window = 3;
  JobResult whole = testing::run(job, "cpu:1", 12);
  REQUIRE_MESSAGE(whole.status.ok(), whole.status.to_string());
  job.checkpoint.dir = dir.string();
  job.checkpoint.every = 6;
  JobResult first = testing::run(job, "cpu:1", 6);
  REQUIRE_MESSAGE(first.status.ok(), first.status.to_string());
  JobRunOptions options;
  options.devices = "cpu:1";
  options.steps = 12;
  options.out = nullptr;
  options.resume = "latest";
  JobResult resumed = run_job(job, options);
  REQUIRE_MESSAGE(resumed.status.ok(), resumed.status.to_string());
  REQUIRE(resumed.start_step == 6);
  REQUIRE(resumed.loss_curve.size() == 6);
  for (size_t i = 0; i < 6; ++i) CHECK(resumed.loss_curve[i] == whole.loss_curve[6 + i]);
  CHECK(resumed.train_metrics.at("loss_scale") == whole.train_metrics.at("loss_scale"));
  CHECK(resumed.train_metrics.at("skipped_steps") == whole.train_metrics.at("skipped_steps"));
  MESSAGE("skipped " << whole.train_metrics.at("skipped_steps") << ", scale " << whole.train_metrics.at("loss_scale"));
  for (const auto& [name, value] : whole.variables) CHECK(value.values == resumed.variables.at(name).values);
  std::filesystem::remove_all(dir);
}

}  // namespace rill
