// Stopping a run early at a step every node agrees on (actor/run_end.h): the
// run ends as a run planned for that many steps would, on one node and
// across nodes, with micro-batches and pipeline stages.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <thread>

#include "actor/run_end.h"
#include "comm/transport.h"
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/node/node_runtime.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

using testing::load_sample;

std::string compiled(const graph::Job& job, const std::string& devices, int nodes, int64_t steps) {
  auto cluster = compiler::parse_devices(devices, nodes);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {.steps = steps});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  return *plan;
}

struct Stopped {
  std::vector<RunReport> reports;
  std::vector<int64_t> snapshot_steps;  // of every snapshot, any node
};

// Runs `plan` on `nodes` in-process runtimes; once node 0's sink has seen
// step `at`, a thread standing in for the master stops the run as the
// agents do: hold every node, agree the end, end every node there.
Stopped run_and_stop(const std::string& plan, int nodes, int64_t plan_steps, int64_t at) {
  auto transports = nodes > 1 ? comm::make_inproc_transports(nodes) : std::vector<std::unique_ptr<comm::Transport>>{};
  std::vector<std::unique_ptr<NodeRuntime>> runtimes;
  std::atomic<bool> reached{false};
  Stopped out;
  std::mutex mu;
  for (int node = 0; node < nodes; ++node) {
    RunOptions options;
    options.node = node;
    options.transport = nodes > 1 ? transports[static_cast<size_t>(node)].get() : nullptr;
    options.stall_timeout_s = 30;
    options.snapshot_every = 1000;  // the last step's snapshot only
    options.on_snapshot = [&](int64_t done, VariablePiece) {
      std::lock_guard lock(mu);
      out.snapshot_steps.push_back(done);
    };
    if (node == 0)
      options.on_step = [&](const StepMetrics& m) {
        if (m.step >= at) reached = true;
      };
    auto runtime = NodeRuntime::build(plan, options);
    REQUIRE_MESSAGE(runtime.ok(), runtime.status().to_string());
    runtimes.push_back(std::move(*runtime));
  }
  out.reports.resize(static_cast<size_t>(nodes));
  std::vector<std::thread> threads;
  for (int node = 0; node < nodes; ++node)
    threads.emplace_back([&, node] { out.reports[static_cast<size_t>(node)] = runtimes[static_cast<size_t>(node)]->run(); });
  while (!reached) std::this_thread::sleep_for(std::chrono::microseconds(200));
  int64_t last_begun = -1;
  for (auto& runtime : runtimes) last_begun = std::max(last_begun, runtime->hold());
  const int64_t end = RunEnd::agreed_end(0, plan_steps, last_begun);
  for (auto& runtime : runtimes) runtime->end_at(end);
  for (auto& t : threads) t.join();
  return out;
}

// Stops `job` on `nodes` x `devices` at step `at` of `steps`, then checks the
// run against one planned for the steps it ran: every node ended at the same
// step, the last snapshot came there, and the variables are bitwise those of
// the planned run (the same kernels in the same order: no tolerance).
void check_stop(const graph::Job& job, const std::string& devices, int nodes, int64_t steps, int64_t at) {
  Stopped stopped = run_and_stop(compiled(job, devices, nodes, steps), nodes, steps, at);
  for (const RunReport& r : stopped.reports) REQUIRE_MESSAGE(r.status.ok(), r.status.to_string());
  const int64_t end = stopped.reports[0].steps;
  CAPTURE(end);
  CHECK(end > at);
  CHECK(end < steps);
  for (const RunReport& r : stopped.reports) CHECK(r.steps == end);
  REQUIRE_FALSE(stopped.snapshot_steps.empty());
  for (int64_t s : stopped.snapshot_steps) CHECK(s == end);
  std::vector<RunReport> planned = testing::run_nodes(compiled(job, devices, nodes, end), nodes, [](RunOptions&) {});
  for (size_t node = 0; node < planned.size(); ++node) {
    for (const auto& [name, value] : planned[node].variables) {
      CAPTURE(name);
      CHECK(stopped.reports[node].variables.at(name).values == value.values);
    }
  }
}

}  // namespace

TEST_CASE("RunEnd: a step published before the hold is counted; none begins while held; the end is agreed") {
  RunEnd end(10, 100);
  CHECK(end.may_begin(10));
  CHECK(end.may_begin(12));
  CHECK(end.hold() == 12);
  CHECK_FALSE(end.may_begin(12));  // held: even a step begun elsewhere on the node waits
  CHECK_FALSE(end.may_begin(13));
  CHECK(end.hold() == 13);         // published while held: a later hold counts it
  end.release(RunEnd::agreed_end(10, 100, 13));
  CHECK(end.end() == 14);
  CHECK(end.end() < 100);  // lowered from the plan's end
  CHECK(end.may_begin(13));
  CHECK_FALSE(end.may_begin(14));
  end.release(50);  // never raised
  CHECK(end.end() == 14);
  // Never past the plan; no step at all when none began anywhere.
  CHECK(RunEnd::agreed_end(10, 100, 9) == 10);
  CHECK(RunEnd::agreed_end(10, 100, 200) == 100);
  CHECK(RunEnd::agreed_end(99, 100, 98) == 99);
}

TEST_CASE("a run stopped on one node ends at a step boundary as a run planned for those steps") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  check_stop(job, "cpu:2", 1, 400, 37);
}

TEST_CASE("a run stopped across 2 nodes ends at the same step on both, as one planned for it") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  check_stop(job, "cpu:1", 2, 400, 37);
}

TEST_CASE("two pipeline stages with 4 micro-batches stop at one step on both nodes") {
  // The pipeline sample: 2 stages, one per node, 4 micro-batches.
  check_stop(testing::synthetic_mlp("samples/mlp/mlp_pipeline.json"), "cpu:1", 2, 200, 9);
}

TEST_CASE("RunOptions::stop ends a node running alone after the steps it began") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  const std::string plan = compiled(job, "cpu:1", 1, 100000);
  std::atomic<bool> stop{false};
  RunOptions options;
  options.stop = &stop;
  options.on_step = [&](const StepMetrics& m) {
    if (m.step == 20) stop = true;
  };
  RunReport report = run_plan(plan, options);
  REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
  CHECK(report.steps > 20);
  CHECK(report.steps < 100000);
}

TEST_CASE("a stop asked for before a run begins runs no step: the variables keep their initial values") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  for (const std::string devices : {"cpu:1", "cpu:2"}) {
    CAPTURE(devices);
    std::atomic<bool> stop{true};
    RunOptions options;
    options.stop = &stop;
    options.initial_values["w"] = {0.5f, -1.5f};
    int64_t steps_seen = 0;
    options.on_step = [&](const StepMetrics&) { ++steps_seen; };
    RunReport report = run_plan(compiled(job, devices, 1, 1000), options);
    REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
    CHECK(report.steps == 0);
    CHECK(steps_seen == 0);
    CHECK(report.variables.at("w").values == std::vector<float>{0.5f, -1.5f});
  }
}

}  // namespace rill
