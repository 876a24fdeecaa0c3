// A node waiting for its checkpoint disk is not stuck: the linear regression
// data parallel on 2 nodes in-process (its gradient summed by a collective
// across them), node 0 (which writes w) snapshotting every 4 steps into a
// CheckpointCollector whose first write takes 3 s: the snapshot of step 12
// waits for room (step 8's waits in memory) for 5 of node 0's stall
// timeouts and 2.5 of node 1's, while node 1 waits in step 13's collective.
// While the writer's bytes grow, both wait on: node 0's stall detector and
// node 1's collective count them (RunOptions::liveness; on real agents node
// 1 hears of them through the master's heartbeats). A disk that writes
// nothing is the stall it was: node 0's error says what it was writing, and
// the snapshot waiting for room lets go of its worker (on_abort), so the
// error comes at once, not when the disk answers.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/checkpoint/checkpoint_collector.h"
#include "runtime/checkpoint/write_progress.h"
#include "runtime/node/node_runtime.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

struct Outcome {
  std::vector<RunReport> reports;
  double seconds = 0;  // until both runs returned
  Status written;      // the collector's finish()
};

// `writing`: the first write gives 256 KiB every 50 ms for 3 s; else
// nothing for 5 s. `devices`: each node's; `nccl`: their sums in one device
// collective (on cpu: LocalCollective) rather than by boxing actors.
Outcome run_waiting_for_disk(bool writing, const std::string& devices = "cpu:1", bool nccl = false) {
  graph::Job job = testing::load_sample("samples/linear_regression/linear_regression.json");
  job.train.nccl = nccl;
  auto cluster = compiler::parse_devices(devices, 2);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {.steps = 14});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  auto transports = comm::make_inproc_transports(2);
  WriteProgress disk;
  std::atomic<int> writes{0};
  CheckpointCollector collector(
      job, {{"w", {0, 0}}},
      [&](int64_t step, std::vector<TensorPiece>) -> StatusOr<NodeFile> {
        disk.begin(step);
        // 3 s of writing, or 5 s of nothing.
        const int ticks = writing ? 60 : 100;
        if (++writes == 1)
          for (int i = 1; i <= ticks; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            if (writing) disk.update(static_cast<uint64_t>(i) << 18, uint64_t{60} << 18);
          }
        disk.end();
        return NodeFile{0, "node-0.safetensors", 64, {}};
      },
      {});
  std::vector<std::unique_ptr<NodeRuntime>> runtimes(2);
  for (int node = 0; node < 2; ++node) {
    RunOptions options;
    options.node = node;
    options.transport = transports[static_cast<size_t>(node)].get();
    // Node 0's stall is found first (node 1's, found first, would abort
    // node 0 and hide what node 0 waited for).
    options.stall_timeout_s = node == 0 ? 0.6 : 1.2;
    options.snapshot_every = 4;
    // Node 0's own writer, and node 1 as the master's heartbeats tell it.
    options.liveness = [&disk] { return static_cast<uint64_t>(disk.bytes()); };
    options.describe_liveness = [&disk] { return disk.describe(); };
    if (node == 0) {
      options.on_snapshot = [&](int64_t step, VariablePiece piece) { collector.add(step, std::move(piece)); };
      options.on_abort = [&] { collector.abandon(); };
    }
    auto built = NodeRuntime::build(*plan, options);
    REQUIRE_MESSAGE(built.ok(), built.status().to_string());
    runtimes[static_cast<size_t>(node)] = std::move(*built);
  }
  Outcome out;
  out.reports.resize(2);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int node = 0; node < 2; ++node)
    threads.emplace_back([&, node] {
      RunReport& report = out.reports[static_cast<size_t>(node)];
      report = runtimes[static_cast<size_t>(node)]->run();
      if (!report.status.ok())  // as the master does
        runtimes[static_cast<size_t>(1 - node)]->abort(Status(Code::kAborted, "the other node failed"));
    });
  for (auto& t : threads) t.join();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  runtimes.clear();
  for (auto& t : transports) t->close();
  out.written = collector.finish();
  return out;
}

TEST_CASE("a node waiting for a checkpoint disk that writes is not stuck; one that writes nothing is") {
  // With 2 devices a node and device collectives, node 0's other device
  // waits for the writing one in their node's LocalCollective too.
  for (const bool nccl : {false, true}) {
    const std::string devices = nccl ? "cpu:2" : "cpu:1";
    CAPTURE(devices);
    const Outcome slow = run_waiting_for_disk(true, devices, nccl);
    for (const RunReport& r : slow.reports) CHECK_MESSAGE(r.status.ok(), r.status.to_string());
    CHECK(slow.reports[0].steps == 14);
    CHECK(slow.seconds >= 2.5);  // it did wait for the disk
    CHECK_MESSAGE(slow.written.ok(), slow.written.to_string());  // steps 4, 8, 12 and 14
  }

  const Outcome hung = run_waiting_for_disk(false);
  const Status& stuck = hung.reports[0].status;
  INFO(stuck.to_string());
  CHECK(stuck.code() == Code::kDeadlineExceeded);
  CHECK(stuck.message().find("job stuck") != std::string::npos);
  CHECK(stuck.message().find("still writing: the checkpoint of step 4: 0.0 of 0.0 MB written") != std::string::npos);
  CHECK_FALSE(hung.reports[1].status.ok());
  CHECK(hung.seconds < 4.0);  // at the stall, not when the write ended (5 s)
}

}  // namespace
}  // namespace rill
