// The engine end to end in one process: jobs compiled to plan bytes, run by
// the node runtime's actors and threads, checked for what they computed.
#include <doctest/doctest.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <new>
#include <unistd.h>
#include <set>
#include <string>
#include <tuple>

#include "comm/counting_transport.h"
#include "comm/transport.h"
#include "compiler/compiler.h"
#include "base/actor_id.h"
#include "graph/global_tensor.h"
#include "graph/job_file.h"
#include "runtime/cluster/job_runner.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"
#include "runtime/node/node_runtime.h"
#include "samples/linear_regression/linear_regression_job.h"
#include "samples/mlp/mlp_job.h"

namespace rill {
using testing::load_sample;
using testing::run;

TEST_CASE("linear regression converges to w = [2, 3] on cpu:1 and cpu:2") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  for (const char* devices : {"cpu:1", "cpu:2"}) {
    CAPTURE(devices);
    JobResult result = run(job, devices);
    REQUIRE_MESSAGE(result.status.ok(), result.status.to_string());
    CHECK(result.steps == 500);
    const auto& w = result.variables.at("w").values;
    REQUIRE(w.size() == 2);
    // Least squares on exact data, converged (loss < 1e-4 means |w - w*| of
    // order 1e-2 at worst, in practice 1e-6): far from any rounding effect.
    CHECK(std::abs(w[0] - 2.0f) < 1e-3);
    CHECK(std::abs(w[1] - 3.0f) < 1e-3);
    CHECK(result.final_loss < 1e-4);
  }
}

// The one-step gradient test (numerics_test.cc) proves the layouts compute the
// same step within derived float bounds. Over many steps the tiny differences
// of summation order grow (training is chaotic: a ReLU flipping at one step
// makes the curves jump apart, here from about step 20 on, by up to 0.4% at
// step 100, and how soon depends on the CPU's GEMM kernel), so only the first
// steps are compared. Bound: measured differences over steps 0-9 are at most
// 1.1e-7 relative under OPENBLAS_CORETYPE Zen, Haswell, SkylakeX and
// Sandybridge (step 0 differs only by GEMM row blocking and the order the
// sink sums partial losses in: a few u). 1e-5 leaves a factor of 100 for
// other CPUs, and is still far below what a wrong gradient (a lost shard, a
// wrong 1/B scale) does to the second step's loss (over 1e-3).
TEST_CASE("data parallelism changes nothing but speed: MLP loss curves of cpu:1, cpu:2 and cpu:3 agree over 10 steps") {
  graph::Job job = load_sample("samples/mlp/mlp.json");
  job.eval.reset();
  JobResult one = run(job, "cpu:1", 10);
  REQUIRE_MESSAGE(one.status.ok(), one.status.to_string());
  REQUIRE(one.loss_curve.size() == 10);
  for (const char* devices : {"cpu:2", "cpu:3"}) {
    CAPTURE(devices);
    JobResult other = run(job, devices, 10);
    REQUIRE_MESSAGE(other.status.ok(), other.status.to_string());
    REQUIRE(other.loss_curve.size() == 10);
    for (size_t i = 0; i < 10; ++i) {
      CAPTURE(i);
      CHECK(std::abs(one.loss_curve[i] - other.loss_curve[i]) <= 1e-5 * std::abs(one.loss_curve[i]));
    }
  }
  CHECK(one.loss_curve.back() < one.loss_curve.front());
}

TEST_CASE("the MLP reaches 84% test accuracy on Fashion-MNIST in 2 epochs, on cpu:1 and cpu:2") {
  graph::Job job = load_sample("samples/mlp/mlp.json");
  for (const char* devices : {"cpu:1", "cpu:2"}) {
    CAPTURE(devices);
    JobResult result = run(job, devices);
    REQUIRE_MESSAGE(result.status.ok(), result.status.to_string());
    REQUIRE(result.eval_metrics.count("accuracy"));
    CHECK(result.eval_samples == 10000);
    CHECK(result.eval_metrics.at("accuracy") >= 0.84);
  }
}

TEST_CASE("a lost message ends in a stuck-job report naming the waiting actors") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  auto cluster = compiler::parse_devices("cpu:1", 1);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {});
  REQUIRE(plan.ok());
  RunOptions options;
  options.stall_timeout_s = 0.5;
  // Lose every ack that returns to the source after step 3.
  options.drop_message = [](const ActorMsg& msg) {
    return msg.type == MsgType::kAck && ActorId::device_type(msg.dst) == DeviceType::kIo && msg.step >= 3;
  };
  RunReport report = run_plan(*plan, options);
  CHECK(report.status.code() == Code::kDeadlineExceeded);
  CHECK(report.status.message().find("waiting actors") != std::string::npos);
  CHECK(report.status.message().find("waits for") != std::string::npos);
}

TEST_CASE("a job built in C++ and the same job loaded from its file compile to the same plan bytes") {
  for (const char* devices : {"cpu:1", "cpu:2"}) {
    auto cluster = compiler::parse_devices(devices, 1);
    REQUIRE(cluster.ok());
    auto from_code = compiler::compile(samples::make_mlp_job(), *cluster, {.steps = 10});
    auto from_file = compiler::compile(load_sample("samples/mlp/mlp.json"), *cluster, {.steps = 10});
    REQUIRE(from_code.ok());
    REQUIRE(from_file.ok());
    CHECK(*from_code == *from_file);
    auto lr_code = compiler::compile(samples::make_linear_regression_job(), *cluster, {});
    auto lr_file = compiler::compile(load_sample("samples/linear_regression/linear_regression.json"), *cluster, {});
    REQUIRE(lr_code.ok());
    REQUIRE(lr_file.ok());
    CHECK(*lr_code == *lr_file);
  }
}

TEST_CASE("a resumed run continues the same loss curve: 100 steps straight = 50 + resume + 50") {
  auto dir = std::filesystem::temp_directory_path() / ("rill-resume-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  graph::Job job = load_sample("samples/mlp/mlp.json");
  job.eval.reset();
  job.optimizer.type = "adam";  // state with a step count: the hardest to resume
  job.optimizer.lr = 1e-3;
  job.checkpoint.dir = (dir / "straight").string();
  job.checkpoint.every = 50;
  JobResult straight = run(job, "cpu:2", 100);
  REQUIRE_MESSAGE(straight.status.ok(), straight.status.to_string());
  CHECK(straight.checkpoints_written == 2);

  job.checkpoint.dir = (dir / "resumed").string();
  JobRunOptions options;
  options.devices = "cpu:2";
  options.steps = 100;
  options.out = nullptr;
  options.resume = (dir / "straight" / "step-00000050").string();
  JobResult resumed = run_job(job, options);
  REQUIRE_MESSAGE(resumed.status.ok(), resumed.status.to_string());
  CHECK(resumed.start_step == 50);
  REQUIRE(resumed.loss_curve.size() == 50);
  // Both runs execute the same kernels in the same order on the same machine
  // (the sink sums the devices' partial losses in a fixed order), so on any
  // CPU the resumed steps are bitwise the straight run's: no tolerance.
  for (size_t i = 0; i < 50; ++i) {
    CAPTURE(i);
    CHECK(resumed.loss_curve[i] == straight.loss_curve[50 + i]);
  }
  for (const auto& [name, value] : straight.variables) {
    CAPTURE(name);
    CHECK(resumed.variables.at(name).values == value.values);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("resuming from a checkpoint that holds the whole run is an error, not a silent no-op") {
  auto dir = std::filesystem::temp_directory_path() / ("rill-resume-end-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  job.checkpoint.dir = dir.string();
  JobResult first = run(job, "cpu:1");
  REQUIRE(first.status.ok());
  JobRunOptions options;
  options.out = nullptr;
  options.resume = "latest";
  JobResult again = run_job(job, options);
  CHECK_FALSE(again.status.ok());
  CHECK(again.status.message().find("nothing is left to run") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("corrupt plan bytes are rejected before any actor is built") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  auto plan = compiler::compile(job, *compiler::parse_devices("cpu:1", 1), {});
  REQUIRE(plan.ok());
  std::string bytes = *plan;
  bytes.resize(bytes.size() / 2);
  RunReport report = run_plan(bytes, {});
  CHECK_FALSE(report.status.ok());
}

TEST_CASE("a variable starts from given initial values") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  auto plan = compiler::compile(job, *compiler::parse_devices("cpu:2", 1), {.steps = 1});
  REQUIRE(plan.ok());
  RunOptions options;
  options.initial_values["w"] = {2.0f, 3.0f};  // already the solution: the gradient is 0
  RunReport report = run_plan(*plan, options);
  REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
  CHECK(report.variables.at("w").values == std::vector<float>{2.0f, 3.0f});
}

TEST_CASE("to_global of the pieces the devices hold is the value the runtime gathers; to_local gives them back") {
  // The Megatron layout on 2 devices: w1 split by columns, w2 by rows, b1
  // split, b2 replicated. Both sides copy the same floats: exact.
  graph::Job job = load_sample("samples/mlp/mlp_model_parallel.json");
  const auto cluster = *compiler::parse_devices("cpu:2", 1);
  auto bytes = compiler::compile(job, cluster, {.steps = 2});
  REQUIRE(bytes.ok());
  RunReport report = run_plan(*bytes, {});
  REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
  const plan::Plan& plan = **compiler::verify_plan(*bytes);
  const graph::Placement devices = graph::whole_cluster(DeviceType::kCpu, 1, 2);
  std::map<std::string, std::pair<NdSbp, std::vector<InlineTensor>>> locals;  // variable -> (SBP, pieces by rank)
  std::set<std::string> split;
  for (const plan::Task* t : *plan.tasks()) {
    if (t->kind() != plan::TaskKind::Variable) continue;
    const plan::RegstDesc* model = compiler::find_regst(plan, t->outputs()->Get(0));
    const std::string name = model->name()->str();
    const std::vector<int64_t> offset(t->variable()->offset()->begin(), t->variable()->offset()->end());
    auto& [sbp, pieces] = locals[name];
    sbp = compiler::read_sbp(model->sbp());
    if (sbp.has(Sbp::kSplit)) split.insert(name);
    for (const VariablePiece& piece : report.pieces)
      if (piece.name == name && piece.offset == offset) {
        InlineTensor local;
        local.name = name;
        local.shape = piece.shape;
        local.f32 = piece.values;
        pieces.push_back(local);  // variable tasks go by rank
        break;
      }
  }
  CHECK(split == std::set<std::string>{"b1", "w1", "w2"});
  for (const auto& [name, layout] : locals) {
    CAPTURE(name);
    const auto& [sbp, pieces] = layout;
    REQUIRE(pieces.size() == 2);
    auto global = to_global(pieces, devices, sbp);
    REQUIRE_MESSAGE(global.ok(), global.status().to_string());
    CHECK(global->shape == report.variables.at(name).shape);
    CHECK(global->f32 == report.variables.at(name).values);
    for (int rank = 0; rank < 2; ++rank) {
      auto local = to_local(*global, devices, sbp, rank);
      REQUIRE(local.ok());
      CHECK(local->f32 == pieces[static_cast<size_t>(rank)].f32);
    }
  }
}

TEST_CASE("micro-batches stream through two stages: stage 0 works on micro-batch i + 1 while stage 1 works on i") {
  // Stage 0 (device 0) is one 16 x 16 layer; stage 1 (device 1) three
  // layers of width 1024, a few ms a micro-batch. What is checked is the
  // order of acts in the recorded timeline, not a duration: stage 0 begins
  // micro-batch i + 1 before stage 1's last act on micro-batch i ends. Stage 0
  // needs only its own slots for that (2 per regst: micro-batch i + 1 may
  // start once i - 1's backward is done), so it holds unless its thread is
  // kept off a core for the whole of a stage-1 micro-batch.
  auto job = graph::parse_job_json(R"({
    "name": "two_stages",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": 1024, "num_classes": 10,
                  "feature_shape": [16], "seed": 3}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [16]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [{"name": "w1", "shape": [16, 16], "init": {"type": "xavier_uniform", "seed": 1}},
                  {"name": "w2", "shape": [16, 1024], "init": {"type": "xavier_uniform", "seed": 2}},
                  {"name": "w3", "shape": [1024, 1024], "init": {"type": "xavier_uniform", "seed": 3}},
                  {"name": "w4", "shape": [1024, 10], "init": {"type": "xavier_uniform", "seed": 4}}],
    "ops": [{"name": "fc1", "type": "matmul", "inputs": ["x", "w1"]},
            {"name": "h1", "type": "relu", "inputs": ["fc1"]},
            {"name": "fc2", "type": "matmul", "inputs": ["h1", "w2"]},
            {"name": "h2", "type": "relu", "inputs": ["fc2"]},
            {"name": "fc3", "type": "matmul", "inputs": ["h2", "w3"]},
            {"name": "h3", "type": "relu", "inputs": ["fc3"]},
            {"name": "logits", "type": "matmul", "inputs": ["h3", "w4"]},
            {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
            {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
    "groups": [{"name": "stage0", "placement": "cpu 0:0", "members": ["x", "w1", "fc1", "h1"]},
               {"name": "stage1", "placement": "cpu 0:1",
                "members": ["y", "w2", "fc2", "h2", "w3", "fc3", "h3", "w4", "logits", "xent", "loss"]}],
    "loss": "loss",
    "optimizer": {"type": "sgd", "lr": 0.01},
    "train": {"steps": 3, "batch_size": 256, "micro_batches": 4, "shuffle": false, "devices": "cpu:2"}
  })", "two_stages.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  auto bytes = compiler::compile(*job, *compiler::parse_devices("cpu:2", 1), {});
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  RunOptions options;
  options.trace = true;
  RunReport report = run_plan(*bytes, options);
  REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
  const ActTrace* fc1 = nullptr;
  std::vector<int64_t> stage1_end(12, 0);  // per micro-batch: the last end of a stage-1 act on it
  for (const ActorTraceRecord& r : report.traces) {
    if (r.name == "fc1@0") fc1 = &r.trace;
    const bool stage1 = ActorId::device_type(r.id) == DeviceType::kCpu && ActorId::device(r.id) == 1;
    if (!stage1 || r.trace.end_ns.size() != 12) continue;  // not once per micro-batch (a variable)
    for (size_t i = 0; i < 12; ++i) stage1_end[i] = std::max(stage1_end[i], r.trace.end_ns[i]);
  }
  REQUIRE(fc1 != nullptr);
  REQUIRE(fc1->begin_ns.size() == 12);  // 3 steps x 4 micro-batches
  int overlapped = 0, pairs = 0;
  for (size_t i = 0; i + 1 < 12; ++i) {
    if ((i + 1) % 4 == 0) continue;  // a step's first micro-batch waits for the last step's update
    ++pairs;
    overlapped += fc1->begin_ns[i + 1] < stage1_end[i];
  }
  CHECK(pairs == 9);
  // Stages taking turns overlap in none of the pairs. A pair may miss when
  // the scheduler keeps stage 0's thread off both cores for a whole stage-1
  // micro-batch (seen in a full `./dev test` on this 2-core machine: 8 of
  // 9), so two misses are allowed: streaming still shows in 7 of 9.
  CHECK(overlapped >= pairs - 2);
}

TEST_CASE("a thread acts for its oldest micro-batch first: one device finishes micro-batch i before it starts i + 1") {
  // One device, 4 micro-batches a step. The source (its own thread) readies
  // micro-batches ahead, so fc1 could run all four forwards in a row; the
  // worker instead takes the ready act of the oldest micro-batch, so on the
  // device thread the micro-batch of successive acts never goes down within
  // a step. A schedule by arrival order (or an actor acting while it can)
  // runs fc1 for micro-batch 1 before micro-batch 0's backward.
  auto job = graph::parse_job_json(R"({
    "name": "one_device_micro_batches",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": 256, "num_classes": 10,
                  "feature_shape": [16], "seed": 3}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [16]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [{"name": "w1", "shape": [16, 64], "init": {"type": "xavier_uniform", "seed": 1}},
                  {"name": "w2", "shape": [64, 10], "init": {"type": "xavier_uniform", "seed": 2}}],
    "ops": [{"name": "fc1", "type": "matmul", "inputs": ["x", "w1"]},
            {"name": "h1", "type": "relu", "inputs": ["fc1"]},
            {"name": "logits", "type": "matmul", "inputs": ["h1", "w2"]},
            {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
            {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
    "loss": "loss",
    "optimizer": {"type": "sgd", "lr": 0.01},
    "train": {"steps": 3, "batch_size": 64, "micro_batches": 4, "shuffle": false, "devices": "cpu:1"}
  })", "one_device_micro_batches.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  auto bytes = compiler::compile(*job, *compiler::parse_devices("cpu:1", 1), {});
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  RunOptions options;
  options.trace = true;
  RunReport report = run_plan(*bytes, options);
  REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
  std::vector<std::tuple<int64_t, int64_t, std::string>> acts;  // begin, step x 4 + micro-batch, actor
  for (const ActorTraceRecord& r : report.traces) {
    if (ActorId::device_type(r.id) != DeviceType::kCpu || r.acts_per_step != 4) continue;
    for (size_t i = 0; i < r.trace.begin_ns.size(); ++i)
      acts.emplace_back(r.trace.begin_ns[i], static_cast<int64_t>(i), r.name);
  }
  std::sort(acts.begin(), acts.end());
  REQUIRE(acts.size() > 3 * 4 * 5);  // forward and backward ops, every micro-batch
  int64_t last = -1;
  for (const auto& [begin, micro, name] : acts) {
    INFO(name, " on micro-batch ", micro % 4, " of step ", micro / 4, " after one on ", last);
    if (micro / 4 == last / 4) CHECK(micro >= last);
    last = micro;
  }
}


namespace {

// Four stages on four devices of one node, 8 micro-batches a step: stage 0
// one 16 x 16 layer, the others layers of width 1024 (about a ms a
// micro-batch each), so stage 0 could run far ahead of the rest.
std::string four_stage_job(const std::string& schedule) {
  return fmt::format(R"({{
    "name": "four_stages",
    "datasets": [{{"name": "pool", "kind": "synthetic", "num_samples": 1024, "num_classes": 10,
                  "feature_shape": [16], "seed": 3}}],
    "inputs": [{{"name": "x", "dataset": "pool", "field": "features", "shape": [16], "placement": "cpu 0:0"}},
               {{"name": "y", "dataset": "pool", "field": "label", "dtype": "i32", "placement": "cpu 0:3"}}],
    "variables": [{{"name": "w1", "shape": [16, 16], "init": {{"type": "xavier_uniform", "seed": 1}}, "placement": "cpu 0:0"}},
                  {{"name": "w2", "shape": [16, 1024], "init": {{"type": "xavier_uniform", "seed": 2}}, "placement": "cpu 0:1"}},
                  {{"name": "w3", "shape": [1024, 1024], "init": {{"type": "xavier_uniform", "seed": 3}}, "placement": "cpu 0:2"}},
                  {{"name": "w4", "shape": [1024, 10], "init": {{"type": "xavier_uniform", "seed": 4}}, "placement": "cpu 0:3"}}],
    "ops": [{{"name": "fc1", "type": "matmul", "inputs": ["x", "w1"], "placement": "cpu 0:0"}},
            {{"name": "h1", "type": "relu", "inputs": ["fc1"], "placement": "cpu 0:0"}},
            {{"name": "fc2", "type": "matmul", "inputs": ["h1", "w2"], "placement": "cpu 0:1"}},
            {{"name": "h2", "type": "relu", "inputs": ["fc2"], "placement": "cpu 0:1"}},
            {{"name": "fc3", "type": "matmul", "inputs": ["h2", "w3"], "placement": "cpu 0:2"}},
            {{"name": "h3", "type": "relu", "inputs": ["fc3"], "placement": "cpu 0:2"}},
            {{"name": "logits", "type": "matmul", "inputs": ["h3", "w4"], "placement": "cpu 0:3"}},
            {{"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"], "placement": "cpu 0:3"}},
            {{"name": "loss", "type": "reduce_mean", "inputs": ["xent"], "placement": "cpu 0:3"}}],
    "loss": "loss",
    "optimizer": {{"type": "sgd", "lr": 0.01}},
    "train": {{"steps": 3, "batch_size": 256, "micro_batches": 8, "schedule": "{}", "shuffle": false,
              "devices": "cpu:4"}}
  }})", schedule);
}

// The most micro-batches stage 0 (device 0) holds at once: when fc1 begins
// micro-batch i, those j <= i whose last backward act on device 0 has not
// ended.
int stage0_in_flight(const RunReport& report) {
  const ActTrace* fc1 = nullptr;
  std::vector<int64_t> backward_end(24, 0);
  for (const ActorTraceRecord& r : report.traces) {
    if (ActorId::device_type(r.id) != DeviceType::kCpu || ActorId::device(r.id) != 0) continue;
    if (r.name == "fc1@0") fc1 = &r.trace;
    if (r.name.rfind("grad/", 0) != 0 || r.trace.end_ns.size() != 24) continue;
    for (size_t i = 0; i < 24; ++i) backward_end[i] = std::max(backward_end[i], r.trace.end_ns[i]);
  }
  REQUIRE(fc1 != nullptr);
  REQUIRE(fc1->begin_ns.size() == 24);  // 3 steps x 8 micro-batches
  int most = 0;
  for (size_t i = 0; i < 24; ++i) {
    int held = 0;
    for (size_t j = i - i % 8; j <= i; ++j) held += backward_end[j] > fc1->begin_ns[i];
    most = std::max(most, held);
  }
  return most;
}

}  // namespace

TEST_CASE("1F1B holds at most S - s micro-batches at stage s; GPipe lets stage 0 run a step's forwards ahead") {
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    CAPTURE(schedule);
    auto job = graph::parse_job_json(four_stage_job(schedule), "four_stages.json");
    REQUIRE_MESSAGE(job.ok(), job.status().to_string());
    auto bytes = compiler::compile(*job, *compiler::parse_devices("cpu:4", 1), {});
    REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
    RunOptions options;
    options.trace = true;
    RunReport report = run_plan(*bytes, options);
    REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
    const int held = stage0_in_flight(report);
    // 1F1B: fc1 needs a slot of x, which stage 0's last backward act on
    // micro-batch i - 4 gives back, so this holds on any machine.
    if (schedule == "1f1b") CHECK(held <= 4);
    // GPipe: x has 8 slots; stage 0's forwards take microseconds while one
    // micro-batch's round trip through the three later stages takes
    // milliseconds, so stage 0 runs ahead unless its thread is kept off a
    // core for the whole round trip.
    if (schedule == "gpipe") CHECK(held > 4);
    MESSAGE(schedule, ": stage 0 held at most ", held, " micro-batches");
  }
}

// A variable's piece goes back to the master (each checkpoint's snapshot,
// the variables at the end) from the lowest rank that holds it only: the
// replicas of a data-parallel variable on other nodes send nothing, a piece
// only node 1 holds comes from node 1.
TEST_CASE("only the lowest rank holding a piece reports it: replicas on other nodes send no snapshot") {
  auto job = graph::parse_job_json(R"J({
    "name": "replicas",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": 512, "num_classes": 4,
                  "feature_shape": [8], "seed": 5}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [8]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [{"name": "w1", "shape": [8, 6], "init": {"type": "xavier_uniform", "seed": 1}},
                  {"name": "w2", "shape": [6, 4], "sbp": "S(1)", "init": {"type": "xavier_uniform", "seed": 2}}],
    "ops": [{"name": "h", "type": "matmul", "inputs": ["x", "w1"]},
            {"name": "logits", "type": "matmul", "inputs": ["h", "w2"]},
            {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
            {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
    "loss": "loss",
    "optimizer": {"type": "momentum", "lr": 0.1},
    "train": {"steps": 4, "batch_size": 16, "shuffle": false}
  })J", "replicas.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  auto plan = compiler::compile(*job, *compiler::parse_devices("cpu:2", 2), {});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  std::mutex mu;
  std::map<int, std::multiset<std::string>> snapshots;  // node -> "variable@offset" per snapshot
  std::vector<RunReport> reports = testing::run_nodes(*plan, 2, [&](RunOptions& options) {
    options.snapshot_every = 2;
    options.on_snapshot = [&, node = options.node](int64_t, VariablePiece piece) {
      std::lock_guard lock(mu);
      snapshots[node].insert(fmt::format("{}@{}", piece.name, fmt::join(piece.offset, ",")));
    };
  });
  for (const RunReport& r : reports) REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
  // w1 is B everywhere: node 0's device 0 alone reports it. w2 is split over
  // the 4 devices by column: each device its own piece.
  CHECK(snapshots[0] == std::multiset<std::string>{"w1@0,0", "w1@0,0", "w2@0,0", "w2@0,0", "w2@0,1", "w2@0,1"});
  CHECK(snapshots[1] == std::multiset<std::string>{"w2@0,2", "w2@0,2", "w2@0,3", "w2@0,3"});
  std::set<std::string> reported1;
  for (const VariablePiece& piece : reports[1].pieces) reported1.insert(piece.name);
  CHECK(reported1 == std::set<std::string>{"w2"});
  CHECK(reports[1].pieces.size() == 2);
  // Every node still sees its own pieces whole.
  CHECK(reports[1].variables.count("w1") == 1);
}

}  // namespace rill
