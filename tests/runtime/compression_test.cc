// Gradients across nodes in bf16 with error feedback (train.compression
// "bf16", actor/gradient_compression.h): what it keeps, which all-reduces
// the compiler sends so, and a data-parallel MLP on 2 nodes that follows the
// uncompressed one (tests/e2e/compression_test.cc: half the bytes, the same
// accuracy, with real agents).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "actor/gradient_compression.h"
#include "compiler/compiler.h"
#include "compiler/plan_generated.h"
#include "runtime/node/carried_state.h"
#include "tests/comm/comm_test_util.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

// |a - b| / |a| (Euclidean norms).
double relative(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(a[i]) * a[i];
  }
  return std::sqrt(diff / norm);
}

// The boxing tasks of node 0's plan, with whether each is compressed.
std::vector<std::pair<std::string, int>> boxings(const graph::Job& job, int nodes) {
  auto cluster = compiler::parse_devices("cpu:1", nodes);
  REQUIRE(cluster.ok());
  compiler::CompileOptions options;
  options.node = 0;
  auto bytes = compiler::compile(job, *cluster, options);
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  const plan::Plan* p = plan::GetPlan(bytes->data());
  std::vector<std::pair<std::string, int>> out;
  for (const plan::Task* t : *p->tasks())
    if (t->kind() == plan::TaskKind::Boxing && t->node() == 0) out.emplace_back(t->name()->str(), t->boxing()->compress());
  return out;
}

}  // namespace

TEST_CASE("error feedback: what was sent over the steps is what was given, within the last rounding") {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  const size_t n = 1000;
  Bf16ErrorFeedback feedback;
  std::vector<double> given(n, 0.0), sent(n, 0.0);
  std::vector<float> in(n);
  std::vector<BFloat16> wire(n);
  for (int step = 0; step < 50; ++step) {
    for (size_t i = 0; i < n; ++i) {
      in[i] = normal(random) + (i % 2 ? 1e-6f : 0.0f);  // some too small for bf16 beside their sum
      given[i] += in[i];
    }
    feedback.compress(in, wire);
    for (size_t i = 0; i < n; ++i) sent[i] += wire[i].to_float();
  }
  // The carried error is exactly what was given and not sent (the float
  // sums of one step are exact in double), and it is at most half a bf16
  // ulp of the last value sent: with 8 significant bits, 2^-8 of it.
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(std::abs(given[i] - sent[i] - feedback.carried()[i]) <= 1e-9);
    CHECK(std::abs(feedback.carried()[i]) <= std::ldexp(std::abs(wire[i].to_float()), -8) + 1e-30);
  }
  // An overflowed step (inf, NaN) is sent as it is but carries nothing on.
  std::vector<float> bad(n, std::numeric_limits<float>::infinity());
  bad[1] = std::numeric_limits<float>::quiet_NaN();
  feedback.compress(bad, wire);
  for (float c : feedback.carried()) CHECK(c == 0.0f);
  CHECK(std::isinf(wire[0].to_float()));
}

TEST_CASE("compression applies to the gradients' all-reduces across nodes, not to activations") {
  graph::Job dp = testing::training_sample("samples/mlp/mlp.json");
  dp.train.compression = graph::Compression::kBF16;
  int compressed = 0;
  for (const auto& [name, compress] : boxings(dp, 2)) {
    CAPTURE(name);
    // Data parallel: every boxing across nodes is a gradient's P -> B.
    if (name.find("P->B") != std::string::npos) CHECK(compress == 1);
    compressed += compress;
  }
  CHECK(compressed > 0);
  // The GPT sample clips its gradients: the updates read them through the
  // norm's ops, and the all-reduce before those is still a gradient's.
  graph::Job gpt = testing::training_sample("samples/gpt/gpt_moby.json");
  gpt.train.compression = graph::Compression::kBF16;
  int gpt_compressed = 0;
  for (const auto& [name, compress] : boxings(gpt, 2)) {
    CAPTURE(name);
    if (name.find("P->B") != std::string::npos) CHECK(compress == 1);
    gpt_compressed += compress;
  }
  CHECK(gpt_compressed > 0);
  // Model parallel: fc2's partial sums (an activation) cross nodes P -> B
  // as they are; only gradients are rounded.
  graph::Job mp = testing::training_sample("samples/mlp/mlp_model_parallel.json");
  mp.train.compression = graph::Compression::kBF16;
  int forward = 0;
  for (const auto& [name, compress] : boxings(mp, 2)) {
    CAPTURE(name);
    if (name.rfind("boxing:fc2", 0) == 0 || name.rfind("boxing:logits", 0) == 0) {
      ++forward;
      CHECK(compress == 0);
    }
    if (compress == 1) CHECK(name.find("grad") != std::string::npos);
  }
  CHECK(forward > 0);
  // Off by default.
  graph::Job plain = testing::training_sample("samples/mlp/mlp.json");
  for (const auto& [name, compress] : boxings(plain, 2)) CHECK(compress == 0);
}

// The sum is rounded once, whatever the world: each rank's values rounded
// to bf16 (with what it carried), added in float in rank order, rounded.
// The reference makes exactly that, so the check is for equal bits. Every
// third value is chosen so that on 4 ranks a partial sum rounded at each
// hop (a ring's) differs: 1 + 3 * 2^-9 rounds once to 1.0078125 and to 1 at
// every addition (on 3 ranks 1 + 2^-8 is a tie, 1 either way; there the
// other values differ). That the reference tells the two apart shows the
// values test the rule. The carried error is each rank's own rounding only.
TEST_CASE("the bf16 all-reduce rounds the sum once, on 2, 3 and 4 ranks alike") {
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    const size_t count = 1001;  // blocks of unequal size
    auto given = [](int rank, size_t i, int step) {
      if (i % 3 == 0) return rank == 0 ? 1.0f : std::ldexp(1.0f, -9);
      return std::sin(static_cast<float>(i * 7 + rank * 13 + step)) * std::ldexp(1.0f, -(static_cast<int>(i) % 20));
    };
    auto transports = comm::make_inproc_transports(world);
    std::vector<std::vector<float>> results(static_cast<size_t>(world));
    std::vector<std::vector<float>> carried(static_cast<size_t>(world));
    auto statuses = comm::testing::run_ranks(world, [&](int rank) -> Status {
      comm::Collectives collectives(*transports[static_cast<size_t>(rank)]);
      Bf16AllReduce reduce(count, world);
      std::vector<float> in(count), out(count);
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < count; ++i) in[i] = given(rank, i, step);
        RILL_RETURN_IF_ERROR(reduce.run(collectives, in, out, 7, comm::ReduceOp::kSum));
      }
      results[static_cast<size_t>(rank)] = out;
      carried[static_cast<size_t>(rank)].assign(reduce.feedback().carried().begin(), reduce.feedback().carried().end());
      return {};
    });
    comm::testing::check_all_ok(statuses);
    // The reference: each rank's feedback replayed, then the sum rounded once.
    std::vector<Bf16ErrorFeedback> feedback(static_cast<size_t>(world));
    std::vector<std::vector<BFloat16>> wire(static_cast<size_t>(world), std::vector<BFloat16>(count));
    for (int step = 0; step < 3; ++step)
      for (int rank = 0; rank < world; ++rank) {
        std::vector<float> in(count);
        for (size_t i = 0; i < count; ++i) in[i] = given(rank, i, step);
        feedback[static_cast<size_t>(rank)].compress(in, wire[static_cast<size_t>(rank)]);
      }
    int rounded_per_hop_differs = 0;
    for (size_t i = 0; i < count; ++i) {
      CAPTURE(i);
      float sum = wire[0][i].to_float(), hops = sum;
      for (size_t r = 1; r < static_cast<size_t>(world); ++r) {
        sum += wire[r][i].to_float();
        hops = BFloat16::from_float(hops + wire[r][i].to_float()).to_float();
      }
      const float expected = BFloat16::from_float(sum).to_float();
      rounded_per_hop_differs += expected != hops;
      for (int rank = 0; rank < world; ++rank) REQUIRE(results[static_cast<size_t>(rank)][i] == expected);
    }
    if (world > 2) CHECK(rounded_per_hop_differs > 0);
    for (int rank = 0; rank < world; ++rank)
      CHECK(carried[static_cast<size_t>(rank)] ==
            std::vector<float>(feedback[static_cast<size_t>(rank)].carried().begin(),
                               feedback[static_cast<size_t>(rank)].carried().end()));
  }
}

// 10 momentum-SGD steps of the MLP sample on 2 nodes, in-process. Each
// step's all-reduced gradient is within 2^-8 relative of the exact one per
// element (one bf16 rounding), the 2 ranks' sum rounds once more, and error
// feedback returns the first rounding the next step: the weights' updates
// differ by a few 2^-8 of themselves. The biases start at 0, so they are
// all updates: measured 2.6e-3 relative (Euclidean norms), bound 1e-2 (a
// little more than 2^-7, for the trajectories' own divergence); the weights
// are mostly their initial values: measured 1.2e-4, bound 1e-3. Compressed,
// they are not the uncompressed bits, and both nodes hold the same replicas.
TEST_CASE("the data-parallel MLP on 2 nodes with bf16 gradients follows the f32 run") {
  auto run = [](graph::Compression compression) {
    graph::Job job = testing::training_sample("samples/mlp/mlp.json");
    job.train.steps = 10;
    job.train.compression = compression;
    auto plan = compiler::compile(job, *compiler::parse_devices("cpu:1", 2), {});
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    return testing::run_nodes(*plan, 2, [](RunOptions&) {});
  };
  const std::vector<RunReport> plain = run(graph::Compression::kNone);
  const std::vector<RunReport> bf16 = run(graph::Compression::kBF16);
  for (const RunReport* r : {&plain[0], &plain[1], &bf16[0], &bf16[1]}) REQUIRE_MESSAGE(r->status.ok(), r->status.to_string());
  for (const auto& [name, value] : plain[0].variables) {
    CAPTURE(name);
    const double difference = relative(value.values, bf16[0].variables.at(name).values);
    CHECK(difference < (name[0] == 'b' ? 1e-2 : 1e-3));
    CHECK(difference > 0);
    CHECK(relative(bf16[0].variables.at(name).values, bf16[1].variables.at(name).values) == 0);
  }
}

// train.compression_start_step (PyTorch's start_powerSGD_iter): the steps
// before it all-reduce plain and carry nothing. A step's loss comes from the
// weights the steps before it made, so with the start at 3 the losses of
// steps 0 to 3 are the plain run's bits (weights from plain updates only)
// and step 4's is not (its weights took step 3's compressed gradient). A
// start at the run's end is the plain run: every variable's bits.
TEST_CASE("compression begins at train.compression_start_step: the steps before it are the plain run's bits") {
  struct Run {
    std::vector<double> losses;  // node 0's, per step
    std::map<std::string, VariableValue> variables;
  };
  auto run = [](graph::Compression compression, int64_t start) {
    graph::Job job = testing::training_sample("bench/mlp_synthetic.json");
    job.train.steps = 5;
    job.train.batch_size = 64;
    job.train.compression = compression;
    job.train.compression_rank = 2;
    job.train.compression_start_step = start;
    auto plan = compiler::compile(job, *compiler::parse_devices("cpu:1", 2), {});
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    Run ran;
    std::vector<RunReport> reports = testing::run_nodes(*plan, 2, [&](RunOptions& options) {
      if (options.node == 0)
        options.on_step = [&ran](const StepMetrics& m) { ran.losses.push_back(m.values[0]); };
    });
    REQUIRE(ran.losses.size() == 5);
    ran.variables = reports[0].variables;
    return ran;
  };
  const Run plain = run(graph::Compression::kNone, 0);
  for (graph::Compression compression : {graph::Compression::kBF16, graph::Compression::kPowerSGD}) {
    CAPTURE(static_cast<int>(compression));
    const Run late = run(compression, 3);
    for (size_t step = 0; step <= 3; ++step) CHECK(late.losses[step] == plain.losses[step]);
    CHECK(late.losses[4] != plain.losses[4]);
    const Run never = run(compression, 5);
    CHECK(never.losses == plain.losses);
    for (const auto& [name, value] : plain.variables) CHECK(never.variables.at(name).values == value.values);
  }
  // The plan says where compression begins.
  graph::Job job = testing::training_sample("samples/mlp/mlp.json");
  job.train.compression = graph::Compression::kBF16;
  job.train.compression_start_step = 100;
  auto bytes = compiler::compile(job, *compiler::parse_devices("cpu:1", 2), {});
  REQUIRE(bytes.ok());
  CHECK(compiler::plan_json(*plan::GetPlan(bytes->data())).find("\"bf16 from step 100\"") != std::string::npos);
  job.train.compression_start_step = -1;
  CHECK(!compiler::compile(job, *compiler::parse_devices("cpu:1", 2), {}).ok());
}

// A checkpoint holds each node's carried error and PowerSGD's Q beside
// the variables (runtime/node/carried_state.h), so a run resumed from one
// goes on as the straight run did: the same kernels on the same machine,
// the same sums in the same order, the same error, Q and draws of Q (its
// seed is the plan's, not the run's), so the same bits. Without the
// carried state (as before it was kept) the resumed run's step 4 took a
// gradient that differs by what step 3's rounding lost, and its loss
// differs.
TEST_CASE("a run resumed from a snapshot with the carried error and Q goes on with the straight run's bits") {
  using Tensors = std::map<std::string, std::vector<float>>;
  using Carried = std::map<std::string, std::pair<Shape, std::vector<float>>>;
  struct Run {
    std::vector<double> losses;  // node 0's, per step run
    std::map<std::string, VariableValue> variables;
    Tensors values, state;  // every piece told at step 3, placed in its logical tensor
    Carried carried;        // the carried state's pieces so, with their logical shapes
  };
  auto run = [](graph::Compression compression, int64_t start, const Tensors& values, const Tensors& state,
                const Carried& carried) {
    graph::Job job = testing::training_sample("bench/mlp_synthetic.json");
    job.train.steps = 6;
    job.train.batch_size = 64;
    job.optimizer.type = "momentum";  // optimizer state too
    job.train.compression = compression;
    job.train.compression_rank = 2;
    job.train.compression_start_step = 1;
    auto plan = compiler::compile(job, *compiler::parse_devices("cpu:1", 2), {});
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    Run ran;
    std::mutex mu;
    std::vector<RunReport> reports = testing::run_nodes(*plan, 2, [&](RunOptions& options) {
      options.start_step = start;
      options.initial_values = values;
      options.initial_state = state;
      // Each node's own part, as the master sends it.
      for (auto& [name, part] : carried_for_node(carried, options.node, 2)) options.initial_state[name] = part;
      options.snapshot_every = 3;
      options.on_snapshot = [&](int64_t done, VariablePiece piece) {
        if (done != 3) return;
        // Whole rows of the logical tensor: offset [k, 0, ...] of pieces as wide as it.
        const int64_t row = piece.logical_shape.size() < 2 ? num_elements(piece.logical_shape)
                                                           : num_elements(piece.logical_shape) / piece.logical_shape[0];
        const size_t at = static_cast<size_t>(piece.offset.empty() ? 0 : piece.offset[0] * row);
        std::lock_guard lock(mu);
        auto place = [&](std::vector<float>& to, const std::vector<float>& from) {
          to.resize(static_cast<size_t>(num_elements(piece.logical_shape)));
          REQUIRE(at + from.size() <= to.size());
          std::copy(from.begin(), from.end(), to.begin() + static_cast<std::ptrdiff_t>(at));
        };
        if (piece.name.starts_with(kCarriedPrefix)) {
          ran.carried[piece.name].first = piece.logical_shape;
          place(ran.carried[piece.name].second, piece.values);
        } else {
          place(ran.values[piece.name], piece.values);
        }
        for (const auto& [name, v] : piece.state) place(ran.state[piece.name + "/" + name], v);
      };
      if (options.node == 0)
        options.on_step = [&ran](const StepMetrics& m) { ran.losses.push_back(m.values[0]); };
    });
    ran.variables = reports[0].variables;
    return ran;
  };
  for (graph::Compression compression : {graph::Compression::kBF16, graph::Compression::kPowerSGD}) {
    CAPTURE(static_cast<int>(compression));
    const Run straight = run(compression, 0, {}, {}, {});
    REQUIRE(straight.losses.size() == 6);
    // bf16: an error per bucket; PowerSGD: an error and Q where a bucket
    // holds a matrix that crosses as factors.
    CHECK(straight.carried.size() >= 2);
    const Run resumed = run(compression, 3, straight.values, straight.state, straight.carried);
    REQUIRE(resumed.losses.size() == 3);
    for (size_t i = 0; i < 3; ++i) CHECK(resumed.losses[i] == straight.losses[3 + i]);
    for (const auto& [name, value] : straight.variables) CHECK(resumed.variables.at(name).values == value.values);
    const Run forgetting = run(compression, 3, straight.values, straight.state, {});
    REQUIRE(forgetting.losses.size() == 3);
    CHECK(forgetting.losses[0] == straight.losses[3]);
    CHECK(forgetting.losses[1] != straight.losses[4]);
  }
}

}  // namespace rill
