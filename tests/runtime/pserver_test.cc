// Parameter-server mode (distributed.mode "pserver", compiler/pserver.h)
// run in-process: pservers holding variable blocks and their updates,
// trainers computing gradients, against collective mode (every node a
// trainer, gradients all-reduced) on the same trainers.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/actor_id.h"
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

struct Trained {
  std::vector<float> losses;                         // per step, node 0's sink
  std::map<std::string, std::vector<float>> values;  // every variable, assembled from every node's pieces
  std::vector<int64_t> zero_row_readies;              // per node: slots that came with zero rows left out
};

Trained train(const graph::Job& job, int nodes, int64_t steps) {
  auto cluster = compiler::parse_devices("cpu:1", nodes);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {.steps = steps});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  Trained out;
  std::vector<RunReport> reports = testing::run_nodes(*plan, nodes, [&](RunOptions& options) {
    options.on_step = [&](const StepMetrics& m) {
      for (size_t i = 0; i < m.names.size(); ++i)
        if (m.names[i] == "loss") out.losses.push_back(static_cast<float>(m.values[i]));
    };
  });
  for (const RunReport& report : reports) {
    out.zero_row_readies.push_back(report.received_zero_row_readies);
    for (const VariablePiece& piece : report.pieces) {
      auto [it, fresh] =
          out.values.try_emplace(piece.name, std::vector<float>(static_cast<size_t>(num_elements(piece.logical_shape))));
      copy_block(piece.logical_shape, piece.offset, piece.shape, it->second.data(),
                 const_cast<float*>(piece.values.data()), false);
    }
  }
  return out;
}

graph::Job pserver_mlp(const std::vector<std::string>& overrides = {}) {
  graph::Job job = testing::load_sample("samples/pserver/mlp_pserver.json");
  job.eval.reset();
  job.train.shuffle = false;
  for (const std::string& o : overrides) {
    Status applied = graph::apply_override(&job, o);
    REQUIRE_MESSAGE(applied.ok(), applied.to_string());
  }
  return job;
}

// With 2 trainers, sync mode computes exactly what collective mode does:
// the pserver adds the two trainers' gradient pieces once (a + b, and f32
// addition commutes, so the ring's b + a is the same number), the trainers
// run the same kernels on the same shapes (their copy of each variable is
// the concat of its blocks, bit for bit), and the update is elementwise on
// the same values. So the loss curves and the variables are equal bit for
// bit on any CPU, over any number of steps.
TEST_CASE("pserver sync mode with 2 trainers equals collective mode bit for bit over 50 steps, every layout") {
  graph::Job collective = pserver_mlp();
  collective.distributed.reset();
  const Trained reference = train(collective, 2, 50);
  REQUIRE(reference.losses.size() == 50);
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{}, {"distributed.split_method=HashName"}, {"distributed.slice_var_up=false"},
        {"distributed.pservers=3,1", "distributed.min_block_size=1000"}}) {
    CAPTURE(layout.empty() ? std::string("RoundRobin, sliced") : layout.back());
    const Trained ps = train(pserver_mlp(layout), 4, 50);
    CHECK(ps.losses == reference.losses);
    REQUIRE(ps.values.size() == reference.values.size());
    for (const auto& [name, values] : reference.values) {
      CAPTURE(name);
      REQUIRE(ps.values.count(name) == 1);  // saved as the job's variable, not as its blocks
      CHECK(ps.values.at(name) == values);
    }
  }
}

// 3 trainers: the pserver adds (a + b) + c, the ring all-reduce in another
// order, so sums differ by a few units in the last place; as for data
// parallelism on 1 vs 3 devices (runtime_test.cc), only the first steps are
// compared, with its bound (1e-5 relative; measured 1e-7), which a lost or
// doubled trainer gradient exceeds by far (over 1e-3 at step 2).
TEST_CASE("pserver sync mode with 3 trainers follows collective mode over 10 steps; 1 trainer too") {
  graph::Job collective = pserver_mlp();
  collective.distributed.reset();
  const Trained reference = train(collective, 3, 10);
  const Trained ps = train(pserver_mlp({"distributed.trainers=3"}), 5, 10);
  REQUIRE(ps.losses.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(std::abs(ps.losses[i] - reference.losses[i]) <= 1e-5f * reference.losses[i]);
  const Trained one = train(collective, 1, 10);
  const Trained ps_one = train(pserver_mlp({"distributed.pservers=0", "distributed.trainers=1"}), 2, 10);
  CHECK(ps_one.losses == one.losses);  // one trainer: nothing to add up
}

}  // namespace
}  // namespace rill

namespace rill {
namespace {

// Async mode: each pserver block applies each trainer's gradient as it comes
// (lanes). The order of updates is the machine's, so values are not
// compared with sync mode; linear regression on exact data has one optimum
// (w = [2, 3]) that any order of small enough steps reaches, so the end is
// checked: within 1e-3, as in the single-device test (runtime_test.cc).

TEST_CASE("async pserver mode (and DC-ASGD) trains linear regression to w = [2, 3], trainers on their own lanes") {
  for (bool dc : {false, true}) {
    CAPTURE(dc);
    graph::Job job = testing::load_sample("samples/linear_regression/linear_regression.json");
    for (const std::string& o : {std::string("distributed.mode=pserver"), std::string("distributed.pservers=0,1"),
                                 std::string("distributed.sync_mode=false"),
                                 std::string("distributed.enable_dc_asgd=") + (dc ? "true" : "false"),
                                 std::string("distributed.min_block_size=1")}) {
      Status applied = graph::apply_override(&job, o);
      REQUIRE_MESSAGE(applied.ok(), applied.to_string());
    }
    auto cluster = compiler::parse_devices("cpu:1", 4);
    REQUIRE(cluster.ok());
    auto plan = compiler::compile(job, *cluster, {});
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    // w [2, 1] in 2 blocks of a row, one per pserver, each with a lane per
    // trainer: 2 gradients read straight from the trainers, 2 models.
    const plan::Plan& p = **compiler::verify_plan(*plan);
    int blocks = 0;
    for (const plan::Task* t : *p.tasks()) {
      if (t->kind() != plan::TaskKind::Variable) continue;
      ++blocks;
      CHECK(t->variable()->lanes() == 2);
      CHECK(t->inputs()->size() == 2);
      CHECK(t->outputs()->size() == 2);
      CHECK(t->variable()->dc_asgd_lambda() == (dc ? 0.04f : 0.0f));
    }
    CHECK(blocks == 2);
    Trained out = train(job, 4, 0);
    const std::vector<float>& w = out.values.at("w");
    REQUIRE(w.size() == 2);
    CHECK(std::abs(w[0] - 2.0f) < 1e-3);
    CHECK(std::abs(w[1] - 3.0f) < 1e-3);
  }
}

}  // namespace
}  // namespace rill

namespace rill {
namespace {

// A distributed lookup table (samples/pserver/ctr_lookup.json): the table's
// blocks live on the pservers, each lookup runs there and the trainers add
// the blocks' rows up (x + 0: exact), and each block's gradient is made on
// its pserver. What differs from a local embedding (collective mode) is
// only the order in which a table row's gradient contributions are added
// (the pserver adds the batch's rows in order; collective mode adds each
// trainer's rows, then the two sums): a few units in the last place per
// step. As for other summation orders (runtime_test.cc), 10 steps within
// 1e-5 relative; a lost trainer's rows or a row on the wrong block moves
// the loss by far more.
TEST_CASE("a distributed lookup table trains as a local embedding does; the trainers never hold the table") {
  graph::Job job = testing::load_sample("samples/pserver/ctr_lookup.json");
  job.eval.reset();
  job.train.shuffle = false;
  graph::Job local = job;
  local.distributed.reset();
  const Trained reference = train(local, 2, 10);
  const Trained ps = train(job, 4, 10);
  REQUIRE(ps.losses.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(std::abs(ps.losses[i] - reference.losses[i]) <= 1e-5f * reference.losses[i]);
  // Each block's reply holds zeros for the rows of ids the other block holds
  // (about half of each trainer's 128 x 8 rows): it crosses without them,
  // every step, from both blocks to both trainers; and each trainer's
  // gradient for a block, masked to the block's rows, goes back so.
  for (int node = 0; node < 4; ++node) {
    CAPTURE(node);
    CHECK(ps.zero_row_readies[static_cast<size_t>(node)] >= 2 * 10);
  }
  // The table is saved whole, from its blocks.
  REQUIRE(ps.values.count("table") == 1);
  CHECK(ps.values.at("table").size() == 1000 * 16);

  auto cluster = compiler::parse_devices("cpu:1", 4);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {.steps = 1});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  const plan::Plan& p = **compiler::verify_plan(*plan);
  for (const plan::RegstDesc* r : *p.regsts()) {
    const std::string name = r->name()->str();
    const bool table_sized = r->shape() && r->shape()->size() == 2 && r->shape()->Get(1) == 16 && r->shape()->Get(0) >= 500;
    if (ActorId::node(r->producer()) >= 2) {
      CAPTURE(name);
      CHECK_FALSE(table_sized);  // a trainer never holds a table block, nor its gradient
    }
  }
}

TEST_CASE("a distributed lookup table read by another op is an error naming both") {
  graph::Job job = testing::load_sample("samples/pserver/ctr_lookup.json");
  job.ops.push_back(graph::Op{"peek", "reduce_sum", {"table"}, {"peek"}, {}, {}, {}});
  auto cluster = compiler::parse_devices("cpu:1", 4);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {.steps = 1});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message().find("op 'peek' reads 'table', a distributed lookup table") != std::string::npos);
}

}  // namespace
}  // namespace rill
