// StepKeeper (runtime/node/step_keeper.h): a node's last two steps in
// memory, from which a job that lost a node goes on.
#include <doctest/doctest.h>

#include <thread>

#include "comm/transport.h"
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/node/node_runtime.h"
#include "runtime/node/step_keeper.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

using testing::synthetic_mlp;

// What compressed all-reduces carry is kept by name for the last three
// steps (a boxing may be a step past its node's newest variables), reusing
// its buffers; a step past a new run's start, or another job's, is gone.
TEST_CASE("step keeper: the carried state of the last three steps, by name, and none of another job") {
  StepKeeper keeper;
  keeper.begin_run(3, {"w"}, 0);
  const std::string error = "compression/b/powersgd_error", q = "compression/b/powersgd_q";
  for (int64_t done = 5; done <= 8; ++done) {
    const std::vector<float> e = {float(done), -float(done)}, qs = {float(10 * done)};
    keeper.keep_carried(error, done, e);
    keeper.keep_carried(q, done, qs);
  }
  keeper.keep_carried(error, 8, std::vector<float>{80, -80});  // the same step again: replaced
  CHECK(keeper.carried_at(3, 5).empty());  // four steps back
  for (int64_t done = 6; done <= 7; ++done) {
    const auto at = keeper.carried_at(3, done);
    REQUIRE(at.size() == 2);
    CHECK(at.at(error) == std::vector<float>{float(done), -float(done)});
    CHECK(at.at(q) == std::vector<float>{float(10 * done)});
  }
  CHECK(keeper.carried_at(3, 8).at(error) == std::vector<float>{80, -80});
  CHECK(keeper.carried_at(4, 7).empty());  // asked as another job's
  keeper.begin_run(3, {"w"}, 7);  // an attempt from step 7: step 8 was given up
  CHECK(keeper.carried_at(3, 8).empty());
  CHECK(keeper.carried_at(3, 7).size() == 2);
  keeper.begin_run(4, {"w"}, 0);
  CHECK(keeper.carried_at(4, 7).empty());
  CHECK(keeper.carried_at(3, 7).empty());
}

// A node of a layout that splits variables across nodes holds only its own
// pieces: a run of the same plan starts from each, and a piece it does not
// hold (at that step, in that shape) is named, never made up.
TEST_CASE("step keeper: a node that holds part of a variable gives each piece it kept, and names one it did not") {
  StepKeeper keeper;
  keeper.begin_run(3, {"w"}, 0);
  const int half = keeper.declare("w", {4}, {2}, {2}, {"momentum"});
  const std::vector<float> model = {7, 8}, momentum = {-7, -8};
  const std::span<const float> state[] = {momentum};
  keeper.keep(half, 9, model, state);
  CHECK_FALSE(keeper.whole());
  std::map<std::string, std::vector<float>> values, states;
  CHECK(keeper.values_at(3, 9, &values, &states).code() == Code::kFailedPrecondition);
  std::vector<float> got;
  std::vector<std::vector<float>> got_state;
  REQUIRE(keeper.piece_at(3, 9, "w", {2}, {2}, &got, &got_state).ok());
  CHECK(got == model);
  REQUIRE(got_state.size() == 1);
  CHECK(got_state[0] == momentum);
  const Status other_half = keeper.piece_at(3, 9, "w", {0}, {2}, &got, &got_state);
  CHECK(other_half.code() == Code::kFailedPrecondition);
  CHECK(other_half.message() == "this node holds no piece of 'w' at offset [0]");
  CHECK(keeper.piece_at(3, 9, "w", {2}, {3}, &got, &got_state).message() ==
        "this node kept 'w' at offset [2] as [2], not [3]");
  CHECK(keeper.piece_at(3, 8, "w", {2}, {2}, &got, &got_state).message() ==
        "variable 'w' at offset [2] is not held in memory at step 8");
  CHECK(keeper.piece_at(4, 9, "w", {2}, {2}, &got, &got_state).message() ==
        "this node's memory holds job 3's variables, not job 4's");
}

TEST_CASE("step keeper: the steps every piece holds, whole variables, values at a step") {
  StepKeeper keeper;
  keeper.begin_run(1, {"w", "b"}, 0);
  // w [4] in two halves with momentum; b [2] whole.
  const int w0 = keeper.declare("w", {4}, {0}, {2}, {"momentum"});
  const int w1 = keeper.declare("w", {4}, {2}, {2}, {"momentum"});
  CHECK(keeper.declare("w", {4}, {2}, {2}, {"momentum"}) == -1);  // another device's replica
  CHECK_FALSE(keeper.steps());
  CHECK_FALSE(keeper.whole());  // w's two halves make it whole, but no piece of b is here
  const int b = keeper.declare("b", {2}, {0}, {2}, {"momentum"});
  CHECK(keeper.whole());
  auto keep = [&](int piece, int64_t done, float base) {
    const std::vector<float> model = {base, base + 1}, momentum = {-base, -base - 1};
    const std::span<const float> state[] = {momentum};
    keeper.keep(piece, done, model, state);
  };
  for (int piece : {w0, w1, b}) keep(piece, 5, 10.0f * piece);
  REQUIRE(keeper.steps());
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(5, 5));
  // w's first half one step ahead: step 5 is still held by everyone.
  keep(w0, 6, 100.0f);
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(5, 5));
  keep(w1, 6, 110.0f);
  keep(b, 6, 120.0f);
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(5, 6));
  std::map<std::string, std::vector<float>> values, state;
  REQUIRE(keeper.values_at(1, 5, &values, &state).ok());
  CHECK(values["w"] == std::vector<float>{0, 1, 10, 11});
  CHECK(state["w/momentum"] == std::vector<float>{0, -1, -10, -11});
  CHECK(values["b"] == std::vector<float>{20, 21});
  values.clear(), state.clear();
  REQUIRE(keeper.values_at(1, 6, &values, &state).ok());
  CHECK(values["w"] == std::vector<float>{100, 101, 110, 111});
  // Step 7 on one piece overwrites its step 5: only 6 is common, and 5 is gone.
  keep(b, 7, 130.0f);
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(6, 6));
  CHECK(keeper.values_at(1, 5, &values, &state).code() == Code::kFailedPrecondition);
  // A piece two steps ahead of another: no step is common.
  keep(b, 8, 140.0f);
  CHECK_FALSE(keeper.steps());
  CHECK(keeper.values_at(2, 6, &values, &state).code() == Code::kFailedPrecondition);  // another job's memory
  keeper.begin_run(2, {"w", "b"}, 0);  // another job: nothing kept
  CHECK_FALSE(keeper.whole());
}

TEST_CASE("step keeper: a later run of the job keeps on in the same pieces, losing nothing until it steps") {
  StepKeeper keeper;
  keeper.begin_run(1, {"w"}, 0);
  const int w = keeper.declare("w", {1}, {0}, {1}, {});
  for (int64_t done : {5, 6}) {
    const std::vector<float> v = {static_cast<float>(done)};
    keeper.keep(w, done, v, {});
  }
  keeper.begin_run(1, {"w"}, 6);  // an attempt from step 6
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(5, 6));  // nothing run yet: nothing lost
  CHECK(keeper.declare("w", {1}, {0}, {1}, {}) == w);
  CHECK(keeper.declare("w", {1}, {0}, {1}, {}) == -1);  // a replica within this run
  keeper.begin_run(1, {"w"}, 6);
  CHECK(keeper.declare("w", {1}, {0}, {1}, {}) == w);
  for (int64_t done : {6, 7}) {
    const std::vector<float> v = {static_cast<float>(done) + 0.5f};
    keeper.keep(w, done, v, {});
  }
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(6, 7));
  std::map<std::string, std::vector<float>> values, state;
  REQUIRE(keeper.values_at(1, 6, &values, &state).ok());
  CHECK(values["w"] == std::vector<float>{6.5f});
  // An attempt from step 3 (a checkpoint): the steps after it are of an
  // attempt given up, and kept no more; neither after a jump.
  keeper.begin_run(1, {"w"}, 3);
  CHECK_FALSE(keeper.steps());
  const std::vector<float> three = {3};
  keeper.keep(w, 3, three, {});
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(3, 3));
  keeper.keep(w, 9, three, {});
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(9, 9));
  // The same piece of another shape (another layout): nothing it held counts.
  keeper.begin_run(1, {"w"}, 9);
  CHECK(keeper.declare("w", {1}, {0}, {1}, {"momentum"}) == w);
  CHECK_FALSE(keeper.steps());
}

TEST_CASE("step keeper: a variable that is not trained holds at every step") {
  StepKeeper keeper;
  keeper.begin_run(1, {"w", "table"}, 0);
  const int w = keeper.declare("w", {1}, {0}, {1}, {});
  const int table = keeper.declare("table", {2}, {0}, {2}, {}, /*trained=*/false);
  const std::vector<float> t = {7, 8};
  keeper.keep(table, 0, t, {});  // as the run starts, never again
  for (int64_t done = 0; done <= 3; ++done) {
    const std::vector<float> v = {static_cast<float>(done)};
    keeper.keep(w, done, v, {});
  }
  REQUIRE(keeper.steps());
  CHECK(*keeper.steps() == std::make_pair<int64_t, int64_t>(2, 3));
  std::map<std::string, std::vector<float>> values, state;
  REQUIRE(keeper.values_at(1, 3, &values, &state).ok());
  CHECK(values["table"] == t);
  CHECK(values["w"] == std::vector<float>{3});
}

TEST_CASE("step keeper: a piece missing makes the node's variables not whole") {
  StepKeeper keeper;
  keeper.begin_run(1, {"w"}, 0);
  keeper.declare("w", {4}, {0}, {2}, {});
  CHECK_FALSE(keeper.whole());
  std::map<std::string, std::vector<float>> values, state;
  CHECK(keeper.values_at(1, 0, &values, &state).code() == Code::kFailedPrecondition);
}

std::vector<std::string> names(const graph::Job& job) {
  std::vector<std::string> out;
  for (const graph::Variable& v : job.variables) out.push_back(v.name);
  return out;
}

// Runs `job` on `nodes` in-process nodes of one cpu each for `steps`, from
// `start` with `values`/`state` (none: the initializers), each node keeping
// its steps in `keepers`.
std::vector<RunReport> run_nodes(const graph::Job& job, int nodes, int64_t steps, std::vector<StepKeeper>& keepers,
                                 int64_t start = 0, const std::map<std::string, std::vector<float>>& values = {},
                                 const std::map<std::string, std::vector<float>>& state = {}) {
  auto cluster = compiler::parse_devices("cpu:1", nodes);
  REQUIRE(cluster.ok());
  auto transports = comm::make_inproc_transports(nodes);
  auto plan = compiler::compile(job, *cluster, {.steps = steps});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  std::vector<RunReport> reports(static_cast<size_t>(nodes));
  // Every node built before any runs, as the agents do (Start after every ack).
  std::vector<std::unique_ptr<NodeRuntime>> runtimes;
  for (int node = 0; node < nodes; ++node) {
    RunOptions options;
    options.node = node;
    options.transport = transports[static_cast<size_t>(node)].get();
    options.stall_timeout_s = 30;
    keepers[static_cast<size_t>(node)].begin_run(1, names(job), start);
    options.keeper = &keepers[static_cast<size_t>(node)];
    options.start_step = start;
    options.initial_values = values;
    options.initial_state = state;
    auto runtime = NodeRuntime::build(*plan, options);
    REQUIRE_MESSAGE(runtime.ok(), runtime.status().to_string());
    runtimes.push_back(std::move(*runtime));
  }
  std::vector<std::thread> threads;
  for (int node = 0; node < nodes; ++node)
    threads.emplace_back([&reports, &runtimes, node] {
      reports[static_cast<size_t>(node)] = runtimes[static_cast<size_t>(node)]->run();
    });
  for (std::thread& t : threads) t.join();
  for (const RunReport& r : reports) REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
  return reports;
}

TEST_CASE("step keeper: every data-parallel node holds the model whole at its last two steps, and a run from "
          "the one before the last ends bit for bit where the whole run did") {
  const graph::Job job = synthetic_mlp("samples/mlp/mlp.json");
  std::vector<StepKeeper> keepers(2);
  std::vector<RunReport> reports = run_nodes(job, 2, 6, keepers);
  for (StepKeeper& k : keepers) {
    REQUIRE(k.steps());
    CHECK(*k.steps() == std::make_pair<int64_t, int64_t>(5, 6));
    CHECK(k.whole());
  }
  std::map<std::string, std::vector<float>> at6, state6, at5, state5;
  REQUIRE(keepers[1].values_at(1, 6, &at6, &state6).ok());
  for (const auto& variable : reports[0].variables)
    CHECK_MESSAGE(at6[variable.first] == variable.second.values, variable.first);
  CHECK(state6.count("w1/momentum") == 1);
  // Step 6 again from node 1's memory at step 5, on 2 nodes: the same bits
  // (the same plan, the same order of sums, the state it stood in).
  REQUIRE(keepers[1].values_at(1, 5, &at5, &state5).ok());
  std::vector<StepKeeper> again(2);
  std::vector<RunReport> rerun = run_nodes(job, 2, 6, again, 5, at5, state5);
  for (const auto& variable : reports[0].variables)
    CHECK_MESSAGE(rerun[0].variables[variable.first].values == variable.second.values, variable.first);
}

TEST_CASE("step keeper: a pipeline stage's node does not hold the model whole") {
  const graph::Job job = synthetic_mlp("samples/mlp/mlp_pipeline.json");
  std::vector<StepKeeper> keepers(2);
  run_nodes(job, 2, 3, keepers);
  // Each holds its stage's variables whole, not the others'.
  CHECK_FALSE(keepers[0].whole());
  CHECK_FALSE(keepers[1].whole());
}

}  // namespace
}  // namespace rill
