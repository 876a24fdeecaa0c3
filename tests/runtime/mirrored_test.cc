// The mirrored view (train.view "mirrored", DDP): every device a rank running
// the whole model on its own rows, gradients averaged over the ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/cluster/job_runner.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

using testing::load_sample;
using testing::run;

graph::Job ddp_sample() { return load_sample("samples/ddp/ddp_train.json"); }

// The seed's job with collective ops on its data (rank r reads rows 2r and
// 2r + 1 of x: the seed's rank 0 rows for even r, rank 1's for odd r), w
// filled with 1, fetching every result at step 1. All values are small
// integers, exact in float whatever the order of the sums.
graph::Job collectives_job(int ranks) {
  graph::Job job = ddp_sample();
  job.datasets[0].tensors[0].shape = {2 * ranks, 2};
  job.datasets[0].tensors[1].shape = {2 * ranks, 1};
  job.datasets[0].tensors[0].f32.clear();
  job.datasets[0].tensors[1].f32.clear();
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> x = r % 2 == 0 ? std::vector<float>{1, 2, 2, 3} : std::vector<float>{4, 6, 3, 1};
    const std::vector<float> y = r % 2 == 0 ? std::vector<float>{8, 13} : std::vector<float>{26, 9};
    job.datasets[0].tensors[0].f32.insert(job.datasets[0].tensors[0].f32.end(), x.begin(), x.end());
    job.datasets[0].tensors[1].f32.insert(job.datasets[0].tensors[1].f32.end(), y.begin(), y.end());
  }
  job.variables[0].init.attrs.set("value", 1.0);
  auto op = [&](const std::string& name, const std::string& type, const std::string& input, const char* reduce) {
    graph::Op o{name, type, {input}, {name}, {}, {}, {}};
    if (reduce != nullptr) o.attrs.set("reduce", std::string(reduce));
    job.ops.push_back(o);
    job.fetch.push_back(name);
  };
  op("x_sum", "all_reduce", "x", nullptr);
  op("x_mean", "all_reduce", "x", "mean");
  op("x_all", "all_gather", "x", nullptr);
  op("x_block", "reduce_scatter", "x_all", nullptr);  // B: every rank's gathered rows, so ranks x them
  op("x_max", "all_reduce", "x", "max");
  op("x_min", "all_reduce", "x", "min");
  op("x_prod", "all_reduce", "x", "prod");
  op("x_block_max", "reduce_scatter", "x_all", "max");  // the max of equal values: rank r's rows
  op("w_sum", "all_reduce", "w", nullptr);          // B: every rank's w, so ranks * w
  op("loss_mean", "all_reduce", "loss", "mean");  // P: each rank's own loss
  job.metrics.push_back({"mean_loss", "loss_mean"});
  return job;
}

// A small MLP on synthetic data in the mirrored view, 2 ranks of 64 rows,
// 10 steps of SGD (fetching w2); `optimizer` and `train`, when given,
// replace or add those sections' fields.
graph::Job ddp_mlp(const nlohmann::json& optimizer = {}, const nlohmann::json& train = {}) {
  nlohmann::json text = nlohmann::json::parse(R"({
    "name": "ddp_mlp",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": 2048, "num_classes": 10,
                  "feature_shape": [32], "seed": 5}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [32]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [{"name": "w1", "shape": [32, 48], "init": {"type": "xavier_uniform", "seed": 1}},
                  {"name": "b1", "shape": [48]},
                  {"name": "w2", "shape": [48, 10], "init": {"type": "xavier_uniform", "seed": 2}}],
    "ops": [{"name": "fc1", "type": "matmul", "inputs": ["x", "w1"]},
            {"name": "fc1_b", "type": "bias_add", "inputs": ["fc1", "b1"]},
            {"name": "h1", "type": "relu", "inputs": ["fc1_b"]},
            {"name": "logits", "type": "matmul", "inputs": ["h1", "w2"]},
            {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
            {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
    "loss": "loss",
    "fetch": ["w2"],
    "optimizer": {"type": "sgd", "lr": 0.5},
    "train": {"view": "mirrored", "steps": 10, "batch_size": 64, "shuffle": false, "devices": "cpu:2"}
  })");
  for (const auto& [key, value] : optimizer.items()) text["optimizer"][key] = value;
  for (const auto& [key, value] : train.items()) text["train"][key] = value;
  auto job = graph::parse_job_json(text.dump(), "ddp_mlp.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

// What rank r of `ranks` fetches for each of collectives_job's ops.
std::map<std::string, std::vector<float>> collectives_expected(int ranks, int r) {
  const std::vector<std::vector<float>> x = {{1, 2, 2, 3}, {4, 6, 3, 1}, {1, 2, 2, 3}, {4, 6, 3, 1}};
  std::vector<float> sum(4, 0), all;
  for (int q = 0; q < ranks; ++q) {
    for (size_t i = 0; i < 4; ++i) sum[i] += x[static_cast<size_t>(q)][i];
    all.insert(all.end(), x[static_cast<size_t>(q)].begin(), x[static_cast<size_t>(q)].end());
  }
  std::vector<float> max = x[0], min = x[0], prod(4, 1);
  for (int q = 0; q < ranks; ++q)
    for (size_t i = 0; i < 4; ++i) {
      max[i] = std::max(max[i], x[static_cast<size_t>(q)][i]);
      min[i] = std::min(min[i], x[static_cast<size_t>(q)][i]);
      prod[i] *= x[static_cast<size_t>(q)][i];  // small integers (at most 144): exact in any order
    }
  std::vector<float> mean = sum, block = x[static_cast<size_t>(r)];
  // The mean is the sum times 1/ranks rounded to float (as the kernel does).
  for (float& v : mean) v *= static_cast<float>(1.0 / ranks);
  for (float& v : block) v *= static_cast<float>(ranks);  // rank r's rows of ranks x the gathered rows
  return {{"x_sum", sum},   {"x_mean", mean}, {"x_all", all},   {"x_block", block},
          {"x_max", max},   {"x_min", min},   {"x_prod", prod}, {"x_block_max", x[static_cast<size_t>(r)]},
          {"w_sum", {static_cast<float>(ranks), static_cast<float>(ranks)}}};
}

// Each rank's summed squared error at w = [1, 1]: rows sum to [3, 5] against
// [8, 13] (89), [10, 4] against [26, 9] (281).
double collectives_mean_loss(int ranks) {
  double sum = 0;
  for (int r = 0; r < ranks; ++r) sum += r % 2 == 0 ? 89.0 : 281.0;
  return sum / ranks;
}


// DDP as nanoGPT trains with it: clipping by the global norm and f16 loss
// scaling in the mirrored view. Every rank holds the averaged gradients
// after the all-reduce, so each computes the same norm and the same
// overflow check and the replicas stay one model. Against the consistent
// view's data parallelism on the same 2 devices (batch 128 there, 64 per
// rank here): the same rows and 16-bit products, the per-row gradient
// factors 1/64 x 1/2 and 1/128 the same power of two, so the losses agree
// within float rounding compounded over 10 AdamW steps (asserted 1e-5, as
// the other mirrored comparisons; measured bitwise equal under OpenBLAS's
// Haswell, Zen and SkylakeX kernels). A first scale of 2^40 makes every
// rank skip the same steps (17).
TEST_CASE("mirrored view with clipping and f16 loss scaling follows the consistent view, replicas equal") {
  const graph::Job job = ddp_mlp({{"type", "adamw"}, {"lr", 0.01}, {"clip_grad_norm", 0.5}}, {{"precision", "f16"}});
  JobResult mirrored = testing::run(job, "cpu:2");
  REQUIRE_MESSAGE(mirrored.status.ok(), mirrored.status.to_string());
  graph::Job consistent = job;
  consistent.train.view = graph::View::kConsistent;
  consistent.train.batch_size = 128;
  JobResult dp = testing::run(consistent, "cpu:2");
  REQUIRE_MESSAGE(dp.status.ok(), dp.status.to_string());
  REQUIRE(mirrored.loss_curve.size() == 10);
  REQUIRE(dp.loss_curve.size() == 10);
  double worst = 0;
  for (size_t i = 0; i < 10; ++i)
    worst = std::max(worst, std::abs(mirrored.loss_curve[i] - dp.loss_curve[i]) / std::abs(dp.loss_curve[i]));
  MESSAGE("mirrored against consistent: worst relative loss difference " << worst);
  CHECK(worst <= 1e-5);
  CHECK(mirrored.loss_curve.back() < mirrored.loss_curve.front());
  CHECK(mirrored.fetched.at("w2@0").values == mirrored.fetched.at("w2@1").values);
  graph::Job overflow = job;
  overflow.train.loss_scale = std::ldexp(1.0, 40);
  overflow.train.steps = 40;
  JobResult skipped = testing::run(overflow, "cpu:2");
  REQUIRE_MESSAGE(skipped.status.ok(), skipped.status.to_string());
  REQUIRE(skipped.rank_metrics.size() == 2);
  const double count = skipped.rank_metrics[0].at("skipped_steps");
  MESSAGE("a first scale of 2^40: " << count << " steps skipped on each rank");
  CHECK(count > 0);
  CHECK(skipped.rank_metrics[1].at("skipped_steps") == count);
  CHECK(skipped.rank_metrics[1].at("loss_scale") == std::ldexp(1.0, 40 - static_cast<int>(count)));
  CHECK(skipped.fetched.at("w2@0").values == skipped.fetched.at("w2@1").values);
}

}  // namespace

TEST_CASE("mirrored view: each rank's loss is over its own rows, and the step's loss is their mean") {
  // The seed's data: rank 0 reads [[1,2],[2,3]] -> [[8],[13]], rank 1
  // [[4,6],[3,1]] -> [[26],[9]]. At w = 0 a rank's summed squared error is
  // the sum of its y^2 (233 and 757), exact in float; with "mean" it is half
  // of that (its own 2 rows, not the 4 of the global batch).
  for (const char* reduction : {"sum", "mean"}) {
    CAPTURE(reduction);
    graph::Job job = ddp_sample();
    job.ops[1].attrs.set("reduction", std::string(reduction));
    job.train.log_every = 1;
    JobResult result = run(job, "cpu:2", 1);
    REQUIRE_MESSAGE(result.status.ok(), result.status.to_string());
    CHECK(result.global_batch == 4);  // batch_size 2 on each of 2 ranks
    REQUIRE(result.rank_metrics.size() == 2);
    const double scale = std::string(reduction) == "mean" ? 0.5 : 1.0;
    CHECK(result.rank_metrics[0].at("loss") == 233 * scale);
    CHECK(result.rank_metrics[1].at("loss") == 757 * scale);
    CHECK(result.train_metrics.at("loss") == (233 + 757) / 2.0 * scale);
  }
}

TEST_CASE("mirrored view: the seed's DDP example converges to w = [2, 3], every replica the same") {
  graph::Job job = ddp_sample();
  for (const char* devices : {"cpu:2", "cpu:3"}) {
    CAPTURE(devices);
    if (std::string(devices) == "cpu:3") {  // a third rank on the first rows again: the same w fits them all
      job.datasets[0].tensors[0].shape = {6, 2};
      job.datasets[0].tensors[0].f32 = {1, 2, 2, 3, 4, 6, 3, 1, 1, 2, 2, 3};
      job.datasets[0].tensors[1].shape = {6, 1};
      job.datasets[0].tensors[1].f32 = {8, 13, 26, 9, 8, 13};
    }
    JobResult result = run(job, devices);
    REQUIRE_MESSAGE(result.status.ok(), result.status.to_string());
    const int ranks = devices[4] - '0';
    REQUIRE(result.fetched.size() == static_cast<size_t>(ranks));
    const std::vector<float>& w0 = result.fetched.at("w@0").values;
    REQUIRE(w0.size() == 2);
    // Least squares on exact data, converged: far from any rounding effect.
    CHECK(std::abs(w0[0] - 2.0f) < 1e-3);
    CHECK(std::abs(w0[1] - 3.0f) < 1e-3);
    // Every rank applies the same all-reduced gradient to the same start,
    // with the same kernel: the replicas agree bit for bit, as DDP's do.
    for (int r = 1; r < ranks; ++r) CHECK(result.fetched.at(fmt::format("w@{}", r)).values == w0);
  }
}

TEST_CASE("mirrored view averages the ranks' gradients: 2 ranks at lr follow one device at lr / 2") {
  // With reduction "sum" a rank's gradient is the sum over its rows; the
  // mirrored step applies lr * (g0 + g1) / 2, the consistent step on the
  // whole batch lr' * (g0 + g1), so lr' = lr / 2 gives the same steps (and
  // lr' = lr twice as large ones: w[0] differs by 0.04 after 10 steps). The two differ only in summation order, a few float ulps
  // of w (|w| < 4) a step on any CPU, and least squares damps rather than
  // grows them over 10 steps: 1e-5 is a factor of 10 above that.
  graph::Job mirrored = ddp_sample();
  graph::Job consistent = ddp_sample();
  consistent.train.view = graph::View::kConsistent;
  consistent.train.batch_size = 4;
  consistent.optimizer.lr = mirrored.optimizer.lr / 2;
  JobResult a = run(mirrored, "cpu:2", 10);
  JobResult b = run(consistent, "cpu:1", 10);
  REQUIRE_MESSAGE(a.status.ok(), a.status.to_string());
  REQUIRE_MESSAGE(b.status.ok(), b.status.to_string());
  const std::vector<float>& wa = a.variables.at("w").values;
  const std::vector<float>& wb = b.variables.at("w").values;
  REQUIRE(wa.size() == 2);
  REQUIRE(wb.size() == 2);
  for (size_t i = 0; i < 2; ++i) CHECK(std::abs(wa[i] - wb[i]) < 1e-5);
  CHECK(std::abs(wa[0] - 2.0f) > 0.05);  // 10 steps are not yet converged: the comparison means something
}

TEST_CASE("mirrored view on 2 nodes: a gradient bucket's all-reduce starts while backward still runs") {
  // Four layers of width 256 on 2 nodes x cpu:1, buckets of at most 300 KB
  // (the 256 x 256 weight gradients, 256 KiB each, one bucket each). What is
  // checked is the order of acts in the recorded timeline, not a duration:
  // the all-reduce of the last layer's gradient begins before the first
  // layer's gradient has ended. Without buckets (one all-reduce for all
  // gradients) that cannot happen at any speed: the one all-reduce waits for
  // w1's gradient. With them it misses only when the comm thread is kept off
  // the cores for all of three layers' backward (a few 256 x 256 x 256 GEMMs
  // each), which a loaded 2-core machine may do now and then: hence 8 steps
  // and at most two misses.
  auto job = graph::parse_job_json(R"({
    "name": "ddp_overlap",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": 2048, "num_classes": 10,
                  "feature_shape": [256], "seed": 3}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [256]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [{"name": "w1", "shape": [256, 256], "init": {"type": "xavier_uniform", "seed": 1}},
                  {"name": "w2", "shape": [256, 256], "init": {"type": "xavier_uniform", "seed": 2}},
                  {"name": "w3", "shape": [256, 256], "init": {"type": "xavier_uniform", "seed": 3}},
                  {"name": "w4", "shape": [256, 256], "init": {"type": "xavier_uniform", "seed": 4}}],
    "ops": [{"name": "fc1", "type": "matmul", "inputs": ["x", "w1"]},
            {"name": "h1", "type": "relu", "inputs": ["fc1"]},
            {"name": "fc2", "type": "matmul", "inputs": ["h1", "w2"]},
            {"name": "h2", "type": "relu", "inputs": ["fc2"]},
            {"name": "fc3", "type": "matmul", "inputs": ["h2", "w3"]},
            {"name": "h3", "type": "relu", "inputs": ["fc3"]},
            {"name": "logits", "type": "matmul", "inputs": ["h3", "w4"]},
            {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
            {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
    "loss": "loss",
    "optimizer": {"type": "sgd", "lr": 0.01},
    "train": {"view": "mirrored", "steps": 8, "batch_size": 256, "shuffle": false, "bucket_bytes": 300000}
  })", "ddp_overlap.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  auto plan = compiler::compile(*job, *compiler::parse_devices("cpu:1", 2), {});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  std::vector<RunReport> reports = testing::run_nodes(*plan, 2, [](RunOptions& options) { options.trace = true; });
  for (const RunReport& report : reports) {
    const ActTrace* first_layer = nullptr;  // the gradient of w1
    const ActTrace* last_bucket = nullptr;  // the all-reduce of w4's gradient
    std::string bucket_collective;
    std::string names;
    for (const ActorTraceRecord& r : report.traces) {
      names += " " + r.name;
      if (r.name.rfind("grad/fc1/", 0) == 0 && r.name.find("matmul") != std::string::npos &&
          r.name.find("@") != std::string::npos && r.trace.end_ns.size() == 8 && first_layer == nullptr)
        first_layer = &r.trace;  // fc1's only gradient is w1's: x needs none
      const bool holds_w4 = r.name.rfind("boxing:grad/logits/", 0) == 0 || r.name.rfind("bucket:grad/logits/", 0) == 0;
      if (holds_w4 && r.name.find("P->B") != std::string::npos) {
        last_bucket = &r.trace;
        bucket_collective = r.collective;
      }
    }
    // 256 KiB, past the 64 KiB up to which all_reduce is one direct exchange.
    CHECK(bucket_collective == "all_reduce ring");
    REQUIRE_MESSAGE(first_layer != nullptr, names);
    REQUIRE_MESSAGE(last_bucket != nullptr, names);
    REQUIRE(last_bucket->begin_ns.size() == 8);
    int overlapped = 0, before_first = 0;
    for (size_t step = 0; step < 8; ++step) {
      overlapped += last_bucket->begin_ns[step] < first_layer->end_ns[step];
      before_first += last_bucket->begin_ns[step] < first_layer->begin_ns[step];
    }
    MESSAGE(overlapped << " of 8 steps began w4's all-reduce before w1's gradient ended, " << before_first
                       << " before it began");
    CHECK(overlapped >= 6);
  }
}

TEST_CASE("collectives as ops of a mirrored job: all_reduce (sum, mean, max, min, prod), all_gather, reduce_scatter") {
  // One node of 2 and 3 ranks (exchanges within the node), then 2 nodes x
  // cpu:1 and x cpu:2 (collectives across nodes, sums within). Inputs split
  // by rank (x), B (w, the gathered rows) and P (each rank's loss).
  struct Case {
    int nodes;
    const char* devices;
  };
  // And as device collectives (train.nccl): the all_reduces each device's
  // rank of one, sums (and max, min, products) in rank order.
  for (const bool nccl : {false, true})
  for (const Case& c : {Case{1, "cpu:2"}, Case{1, "cpu:3"}, Case{2, "cpu:1"}, Case{2, "cpu:2"}}) {
    CAPTURE(nccl);
    CAPTURE(c.nodes);
    CAPTURE(c.devices);
    auto cluster = compiler::parse_devices(c.devices, c.nodes);
    REQUIRE(cluster.ok());
    const int ranks = cluster->parallel();
    graph::Job job = collectives_job(ranks);
    job.train.nccl = nccl;
    auto plan = compiler::compile(job, *cluster, {.steps = 1});
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    CHECK((plan::GetPlan(plan->data())->comm_groups() != nullptr) == nccl);
    std::map<std::string, std::vector<float>> fetched;
    std::vector<double> mean_loss;
    testing::run_nodes(*plan, c.nodes, [&](RunOptions& options) {
      options.on_step = [&](const StepMetrics& m) {
        for (size_t i = 0; i < m.fetch_names.size(); ++i) {
          const TensorView& v = *m.fetched[i];
          fetched[m.fetch_names[i]] = std::vector<float>(v.f32(), v.f32() + v.size());
        }
        for (size_t k = 0; k < m.names.size(); ++k)
          if (m.names[k] == "mean_loss")
            for (int r = 0; r < m.ranks; ++r) mean_loss.push_back(m.rank_values[k * static_cast<size_t>(m.ranks) + r]);
      };
    });
    for (int r = 0; r < ranks; ++r)
      for (const auto& [name, want] : collectives_expected(ranks, r)) {
        INFO(name << "@" << r);
        REQUIRE(fetched.count(fmt::format("{}@{}", name, r)) == 1);
        CHECK(fetched.at(fmt::format("{}@{}", name, r)) == want);
      }
    REQUIRE(mean_loss.size() == static_cast<size_t>(ranks));
    for (double v : mean_loss) CHECK(v == collectives_mean_loss(ranks));
  }
}

TEST_CASE("collectives in a job: refused in the consistent view, and where the ranks' values differ in shape") {
  graph::Job job = collectives_job(2);
  job.train.view = graph::View::kConsistent;
  job.train.batch_size = 4;
  auto cluster = compiler::parse_devices("cpu:2", 1);
  auto plan = compiler::compile(job, *cluster, {.steps = 1});
  REQUIRE(!plan.ok());
  CHECK(plan.status().message().find("mirrored view") != std::string::npos);

  // reduce_scatter of x's 2 rows over 3 ranks: no equal blocks.
  graph::Job uneven = collectives_job(3);
  uneven.ops.push_back({"bad", "reduce_scatter", {"x"}, {"bad"}, {}, {}, {}});
  uneven.fetch.push_back("bad");
  plan = compiler::compile(uneven, *compiler::parse_devices("cpu:3", 1), {.steps = 1});
  REQUIRE(!plan.ok());
  CHECK(plan.status().message().find("op 'bad' (reduce_scatter)") != std::string::npos);
  CHECK(plan.status().message().find("3 equal blocks") != std::string::npos);
}

TEST_CASE("one tensor read twice by a task (an op's two inputs, a reported and fetched loss) runs") {
  // Each port reading the regst takes every ready; one of them acks it.
  graph::Job job = ddp_sample();
  job.ops.push_back({"x2", "mul", {"x", "x"}, {"x2"}, {}, {}, {}});
  job.fetch = {"x2", "loss"};
  JobResult result = run(job, "cpu:2", 2);
  REQUIRE_MESSAGE(result.status.ok(), result.status.to_string());
  CHECK(result.fetched.at("x2@0").values == std::vector<float>{1, 4, 4, 9});
  CHECK(result.fetched.at("x2@1").values == std::vector<float>{16, 36, 9, 1});
  REQUIRE(result.fetched.at("loss@1").values.size() == 1);
  CHECK(result.fetched.at("loss@1").values[0] == result.rank_metrics[1].at("loss"));
}

}  // namespace rill

namespace rill {

// Gradient accumulation in the mirrored view: each rank reads its batch_size
// rows as K micro-batches, runs forward and backward on each, averages its
// gradients over them where they are made, and the ranks' averaged
// gradients are all-reduced once a step. With a loss that is a mean over a
// rank's rows, the K micro-batch gradients' mean is the rank's batch
// gradient: only the grouping of the float sums changes (a few ulps of each
// gradient a step), and over 10 steps of a 3-layer MLP with SGD those stay
// far below 1e-5 of the weights (|w| < 1) on any CPU, as in the consistent
// view's micro-batch test (tests/e2e/cluster_test.cc).
TEST_CASE("mirrored view with micro-batches: 4 micro-batches of 16 rows per rank follow batches of 64, on 1 and 2 nodes") {
  graph::Job job = ddp_mlp();
  JobResult whole = testing::run(job, "cpu:2");
  REQUIRE_MESSAGE(whole.status.ok(), whole.status.to_string());
  graph::Job micro = job;
  micro.train.micro_batches = 4;
  JobResult split = testing::run(micro, "cpu:2");
  REQUIRE_MESSAGE(split.status.ok(), split.status.to_string());
  CHECK(split.global_batch == 128);  // 64 rows on each of 2 ranks, as without micro-batches
  auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    return worst;
  };
  for (const char* w : {"w1", "b1", "w2"}) {
    CAPTURE(w);
    CHECK(close(whole.variables.at(w).values, split.variables.at(w).values) < 1e-5);
  }
  // The steps moved the weights well beyond that bound: the comparison means something.
  CHECK(close(whole.variables.at("w2").values, split.variables.at("w2").values) <
        close(whole.variables.at("w2").values, std::vector<float>(whole.variables.at("w2").values.size(), 0)));
  CHECK(std::abs(whole.train_metrics.at("loss") - split.train_metrics.at("loss")) < 1e-5);
  // Each rank reads its own 64 rows, 16 at a time: its loss is the one it
  // has without micro-batches (the mean of its micro-batches' means).
  REQUIRE(split.rank_metrics.size() == 2);
  for (size_t r = 0; r < 2; ++r)
    CHECK(std::abs(whole.rank_metrics[r].at("loss") - split.rank_metrics[r].at("loss")) < 1e-5);
  // The replicas stay bitwise equal: every rank applies the same all-reduced gradient.
  CHECK(split.fetched.at("w2@0").values == split.fetched.at("w2@1").values);
  // On 2 nodes x 2 ranks (the all-reduce across nodes, in-process) the same
  // 4 ranks of 64 rows, 4 micro-batches each, follow one node's 4 ranks.
  auto four = job;
  four.train.devices = "cpu:4";
  JobResult one_node = testing::run(four, "cpu:4");
  REQUIRE_MESSAGE(one_node.status.ok(), one_node.status.to_string());
  auto plan = compiler::compile(micro, *compiler::parse_devices("cpu:2", 2), {});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  std::vector<RunReport> reports = testing::run_nodes(*plan, 2, [](RunOptions&) {});
  for (const RunReport& report : reports) {
    REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
    for (const char* w : {"w1", "b1", "w2"}) {
      CAPTURE(w);
      CHECK(close(one_node.variables.at(w).values, report.variables.at(w).values) < 1e-5);
    }
  }
}

}  // namespace rill
