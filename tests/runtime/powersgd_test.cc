// PowerSGD (train.compression "powersgd", actor/powersgd.h): which tensors
// cross as factors, what a step returns, what it carries, and that every
// node gets the same bits. Ranks are threads over the in-process transport.
// The MLP and the GPT sample trained with it by real agents:
// tests/e2e/compression_test.cc.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "actor/powersgd.h"
#include "compiler/compiler.h"
#include "compiler/plan_generated.h"
#include "tests/comm/comm_test_util.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// Runs `steps` steps on `world` ranks; given(rank, step) is a rank's buffer.
// Returns each rank's outputs per step and its carried error at the end.
struct Ran {
  std::vector<std::vector<std::vector<float>>> out;  // [rank][step]
  std::vector<std::vector<float>> carried;           // [rank]
};
Ran run(const std::vector<Shape>& shapes, int rank, int world, int steps,
        const std::function<std::vector<float>(int, int)>& given, comm::ReduceOp op = comm::ReduceOp::kSum) {
  auto transports = comm::make_inproc_transports(world);
  Ran ran;
  ran.out.resize(static_cast<size_t>(world));
  ran.carried.resize(static_cast<size_t>(world));
  auto statuses = comm::testing::run_ranks(world, [&](int r) -> Status {
    comm::Collectives collectives(*transports[static_cast<size_t>(r)]);
    PowerSgdAllReduce reduce(powersgd_layout(shapes, rank), world, 11);
    for (int step = 0; step < steps; ++step) {
      std::vector<float> buffer = given(r, step);
      RILL_RETURN_IF_ERROR(reduce.run(collectives, buffer, 3, op));
      ran.out[static_cast<size_t>(r)].push_back(buffer);
    }
    ran.carried[static_cast<size_t>(r)].assign(reduce.carried().begin(), reduce.carried().end());
    return {};
  });
  comm::testing::check_all_ok(statuses);
  return ran;
}

}  // namespace

TEST_CASE("PowerSGD's layout: matrices at least twice the factors' size are low rank, the rest cross whole") {
  // [64, 32] at rank 4: 4 * 96 * 2 = 768 < 2048. [8, 8]: 4 * 16 * 2 = 128 > 64.
  // [16, 2, 3] is the matrix [16, 6]: 4 * 22 * 2 > 96. A bias is whole.
  const PowerSgdLayout l = powersgd_layout({{64, 32}, {8, 8}, {16, 2, 3}, {100}}, 4);
  REQUIRE(l.members.size() == 4);
  CHECK(l.members[0].low_rank);
  CHECK(!l.members[1].low_rank);
  CHECK(!l.members[2].low_rank);
  CHECK(!l.members[3].low_rank);
  CHECK(l.members[2].rows == 16);
  CHECK(l.members[2].cols == 6);
  CHECK(l.elements == 2048 + 64 + 96 + 100);
  CHECK(l.first == 64 * 4 + 64 + 96 + 100);  // P, then the whole ones
  CHECK(l.second == 32 * 4);
  CHECK(l.error == 2048);
  CHECK(l.members[1].p == 256);
  CHECK(l.members[3].offset == 2048 + 64 + 96);
  // A 3-axis tensor large enough: [32, 8, 8] is [32, 64], 4 * 96 * 2 < 2048.
  CHECK(powersgd_layout({{32, 8, 8}}, 4).members[0].low_rank);
  // Exactly half is not enough, as PyTorch's rule: [16, 16] at rank 4 is 256 both ways.
  CHECK(!powersgd_layout({{16, 16}}, 4).members[0].low_rank);
}

// Each rank's gradient is u v_k^T for a u common to all: their sum is rank
// one, and a rank-2 PowerSGD returns it exactly but for float rounding. The
// sums of a few hundred products of values near 1 in float, then the
// Gram-Schmidt and the products again, stay within 1e-5 relative of the
// double reference (each step's relative rounding is about 2^-24 times the
// terms, a few hundred); measured 1.9e-7 to 3.4e-7. The bias crosses whole: its
// sum is a float ring's, within 1e-6. Each node carries its gradient's
// difference from the mean (E = M - out / world, the paper's and PyTorch's
// rule); summed over the nodes that is what the sum missed, only rounding:
// within 1e-5 of the gradients' norms a step. Every rank holds the same bits.
TEST_CASE("PowerSGD returns a low-rank sum exactly, the same bits on every node, on 2 and 3 nodes") {
  const size_t rows = 48, cols = 40;
  for (int world : {2, 3}) {
    CAPTURE(world);
    std::vector<double> u(rows), v(static_cast<size_t>(world) * cols), bias(static_cast<size_t>(world) * 7);
    std::mt19937 random(5);
    std::uniform_real_distribution<double> uniform(-1, 1);
    for (double& x : u) x = uniform(random);
    for (double& x : v) x = uniform(random);
    for (double& x : bias) x = uniform(random);
    auto given = [&](int r, int) {
      std::vector<float> b(rows * cols + 7);
      for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j)
          b[i * cols + j] = static_cast<float>(u[i] * v[static_cast<size_t>(r) * cols + j]);
      for (size_t i = 0; i < 7; ++i) b[rows * cols + i] = static_cast<float>(bias[static_cast<size_t>(r) * 7 + i]);
      return b;
    };
    const Ran ran = run({{48, 40}, {7}}, 2, world, 3, given);
    std::vector<double> exact(rows * cols + 7, 0.0);
    for (int r = 0; r < world; ++r) {
      const std::vector<float> b = given(r, 0);
      for (size_t i = 0; i < b.size(); ++i) exact[i] += b[i];
    }
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      const std::vector<float>& out = ran.out[0][static_cast<size_t>(step)];
      std::vector<double> diff(rows * cols), whole(rows * cols);
      for (size_t i = 0; i < rows * cols; ++i) diff[i] = out[i] - exact[i], whole[i] = exact[i];
      CHECK(norm(diff) <= 1e-5 * norm(whole));
      for (size_t i = rows * cols; i < exact.size(); ++i) CHECK(std::abs(out[i] - exact[i]) <= 1e-6);
      for (int r = 1; r < world; ++r) CHECK(ran.out[static_cast<size_t>(r)][static_cast<size_t>(step)] == out);
    }
    std::vector<double> missed(rows * cols, 0.0);
    double given_norms = 0;
    for (int r = 0; r < world; ++r) {
      const std::vector<float> b = given(r, 0);
      given_norms += norm(std::vector<double>(b.begin(), b.begin() + rows * cols));
      for (size_t i = 0; i < rows * cols; ++i) missed[i] += ran.carried[static_cast<size_t>(r)][i];
    }
    CHECK(norm(missed) <= 3 * 1e-5 * given_norms);
    CHECK(norm(std::vector<double>(ran.carried[0].begin(), ran.carried[0].end())) > 0.1);  // each its own share
  }
}

// A full-rank gradient, the same every step, through rank 1: one step
// returns only its best direction, but error feedback sends the rest later.
// Over the steps what was returned plus what the nodes carry is what was
// given (each step's E = M - out / world adds up so, in float: within 1e-4
// relative over the steps of sums of values near 1), and the mean of the
// returned sums tends to the true sum, as what is still carried over the
// steps: measured 0.029 of its norm after 200 steps (against 0.92 for
// the first step alone); bound 0.1.
TEST_CASE("PowerSGD's error feedback: over steps the nodes send what they were given") {
  const size_t rows = 12, cols = 10;
  const int world = 2, steps = 200;
  std::mt19937 random(9);
  std::normal_distribution<float> normal(0, 1);
  std::vector<std::vector<float>> m(world, std::vector<float>(rows * cols));
  for (auto& g : m)
    for (float& x : g) x = normal(random);
  const Ran ran = run({{12, 10}}, 1, world, steps, [&](int r, int) { return m[static_cast<size_t>(r)]; });
  std::vector<double> exact(rows * cols, 0.0), returned(rows * cols, 0.0), first(rows * cols);
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < exact.size(); ++i) exact[i] += m[static_cast<size_t>(r)][i];
  for (int step = 0; step < steps; ++step)
    for (size_t i = 0; i < exact.size(); ++i) returned[i] += ran.out[0][static_cast<size_t>(step)][i];
  std::vector<double> balance(exact.size()), mean(exact.size());
  for (size_t i = 0; i < exact.size(); ++i) {
    double carried = 0;
    for (int r = 0; r < world; ++r) carried += ran.carried[static_cast<size_t>(r)][i];
    balance[i] = returned[i] + carried - steps * exact[i];
    mean[i] = returned[i] / steps - exact[i];
    first[i] = ran.out[0][0][i] - exact[i];
  }
  CHECK(norm(balance) <= 1e-4 * steps * norm(exact));
  MESSAGE("first step off by ", norm(first) / norm(exact), ", the mean of ", steps, " by ", norm(mean) / norm(exact));
  CHECK(norm(mean) <= 0.1 * norm(exact));
  CHECK(norm(first) > 0.5 * norm(exact));  // one rank-1 step alone is far off: the feedback does the work
}

// A step whose sum has lower rank than r leaves some of P's columns zero,
// and Q's with them; they must not stay so. Step 0's gradients are zero
// (every column dropped), then each node's is u_k v_k^T, a sum of rank 2
// that rank 2 returns exactly but for rounding (within 1e-5 relative, as
// the low-rank test above): only if Q was drawn again.
TEST_CASE("PowerSGD after a step of lower rank than r: the empty columns start again") {
  const size_t rows = 24, cols = 20;
  std::vector<float> u(2 * rows), v(2 * cols);
  for (size_t i = 0; i < u.size(); ++i) u[i] = std::cos(static_cast<float>(3 * i + 1));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(5 * i + 2));
  auto given = [&](int r, int step) {
    std::vector<float> b(rows * cols, 0.0f);
    if (step > 0)
      for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j) b[i * cols + j] = u[static_cast<size_t>(r) * rows + i] * v[static_cast<size_t>(r) * cols + j];
    return b;
  };
  const Ran ran = run({{24, 20}}, 2, 2, 3, given);
  for (float x : ran.out[0][0]) CHECK(x == 0.0f);
  std::vector<double> exact(rows * cols, 0.0);
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> b = given(r, 1);
    for (size_t i = 0; i < b.size(); ++i) exact[i] += b[i];
  }
  for (int step = 1; step < 3; ++step) {
    CAPTURE(step);
    std::vector<double> diff(exact.size());
    for (size_t i = 0; i < exact.size(); ++i) diff[i] = ran.out[0][static_cast<size_t>(step)][i] - exact[i];
    CHECK(norm(diff) <= 1e-5 * norm(exact));
    CHECK(ran.out[1][static_cast<size_t>(step)] == ran.out[0][static_cast<size_t>(step)]);
  }
}

// A step that overflowed returns non-finite values (the loss scaler skips
// it) and carries nothing on: the next steps are as if it never came,
// the same bits as a run without it given Q starts again alike.
TEST_CASE("PowerSGD after an overflowed step: nothing of it carries on") {
  const size_t rows = 16, cols = 16;
  auto gradient = [&](int r, int step) {
    std::vector<float> b(rows * cols);
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::sin(static_cast<float>(i + 31 * r + 7 * step));
    return b;
  };
  const Ran ran = run({{16, 16}}, 1, 2, 3, [&](int r, int step) {
    std::vector<float> b = gradient(r, step);
    if (step == 1 && r == 1) b[5] = std::numeric_limits<float>::infinity();
    return b;
  });
  bool finite = true;
  for (float x : ran.out[0][1]) finite = finite && std::isfinite(x);
  CHECK(!finite);
  for (float x : ran.out[0][2]) CHECK(std::isfinite(x));
  // Step 2 after the reset is step 0 of a fresh start given step 2's values.
  const Ran fresh = run({{16, 16}}, 1, 2, 1, [&](int r, int) { return gradient(r, 2); });
  CHECK(fresh.out[0][0] == ran.out[0][2]);
}

TEST_CASE("powersgd marks the gradients' all-reduces across nodes with its rank, and sends fewer bytes") {
  graph::Job job = testing::training_sample("samples/mlp/mlp.json");
  job.train.compression = graph::Compression::kPowerSGD;
  job.train.compression_rank = 3;
  job.train.bucket_bytes = 0;  // a boxing per gradient
  auto bytes = compiler::compile(job, *compiler::parse_devices("cpu:1", 2), {});
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  const plan::Plan* p = plan::GetPlan(bytes->data());
  int compressed = 0;
  for (const plan::Task* t : *p->tasks()) {
    if (t->kind() != plan::TaskKind::Boxing || t->boxing()->num_nodes() < 2) continue;
    CAPTURE(t->name()->str());
    CHECK(t->boxing()->compress() == 2);
    CHECK(t->boxing()->compress_rank() == 3);
    ++compressed;
  }
  CHECK(compressed > 0);
  // `rill plan --json` says so and counts the factors' bytes: w1 [784, 512]
  // at rank 3 sends P [784, 3] and Q [512, 3] (2 nodes: each sends its
  // block of the sum and receives the rest, one buffer's bytes each way).
  const nlohmann::json printed = nlohmann::json::parse(compiler::plan_json(*p));
  bool found = false;
  for (const nlohmann::json& task : printed["tasks"]) {
    if (!task.contains("boxing") || task["boxing"]["num_nodes"] != 2) continue;
    CAPTURE(task.dump());
    CHECK(task["boxing"]["compress"] == "powersgd rank 3");
    if (task["boxing"]["logical_bytes"] == 784 * 512 * 4) {
      CHECK(task["boxing"]["bytes_sent_per_step"] == (784 + 512) * 3 * 4);
      found = true;
    }
  }
  CHECK(found);
  // A rank past the limit is refused where the job is checked.
  job.train.compression_rank = 65;
  CHECK(!compiler::compile(job, *compiler::parse_devices("cpu:1", 2), {}).ok());
}

}  // namespace rill
