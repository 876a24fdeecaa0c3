// Faults on the data plane between nodes: the linear regression as a
// parameter-server job (node 0 holds w and b, node 1 trains; every byte
// between them is an actor message) runs with a fault injected into the
// trainer's link to the pserver (comm/faulty_transport.h). A delay is
// tolerated and changes nothing; a lost, repeated, swapped or corrupted
// message ends the run on both nodes at once with an error naming the link,
// and a link cut silently by the stall timeout, naming what waits for whom:
// never a wrong result and never a hang.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/faulty_transport.h"
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/node/node_runtime.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

using comm::FaultyTransport;
using Fault = FaultyTransport::Fault;

std::string pserver_plan() {
  graph::Job job = testing::load_sample("samples/linear_regression/linear_regression.json");
  for (const char* o : {"distributed.mode=pserver", "distributed.pservers=0"})
    REQUIRE(graph::apply_override(&job, o).ok());
  auto cluster = compiler::parse_devices("cpu:1", 2);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {.steps = 60});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  return *plan;
}

struct Outcome {
  std::vector<Status> status;  // per node
  std::map<std::string, VariableValue> variables;
  double seconds = 0;
};

// Both nodes in-process, node 1's sends through `faulty` (set up by
// `inject`). The first node to fail aborts the other, as the master does.
// `ended` sees the transport once the runs are destroyed, before it closes.
Outcome run_with(const std::string& plan, const std::function<void(FaultyTransport&)>& inject,
                 const std::function<void(FaultyTransport&)>& ended = {}) {
  auto transports = comm::make_inproc_transports(2);
  auto faulty = std::make_unique<FaultyTransport>(std::move(transports[1]));
  inject(*faulty);
  std::vector<comm::Transport*> links = {transports[0].get(), faulty.get()};
  std::vector<std::unique_ptr<NodeRuntime>> runtimes(2);
  Outcome out;
  out.status.resize(2);
  for (int node = 0; node < 2; ++node) {
    RunOptions options;
    options.node = node;
    options.transport = links[static_cast<size_t>(node)];
    // A fault that leaves both nodes waiting ends here: node 1 first, by
    // 3 s, so that the cut link below is reported by the node it starves
    // (with equal timeouts a loaded machine may let node 0's fire first,
    // and node 1 is then only aborted).
    options.stall_timeout_s = node == 0 ? 8 : 5;
    auto built = NodeRuntime::build(plan, options);
    REQUIRE_MESSAGE(built.ok(), built.status().to_string());
    runtimes[static_cast<size_t>(node)] = std::move(*built);
  }
  std::mutex mu;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  std::vector<RunReport> reports(2);
  for (int node = 0; node < 2; ++node)
    threads.emplace_back([&, node] {
      reports[static_cast<size_t>(node)] = runtimes[static_cast<size_t>(node)]->run();
      if (!reports[static_cast<size_t>(node)].status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        runtimes[static_cast<size_t>(1 - node)]->abort(
            Status(Code::kAborted, fmt::format("node {} failed", node)));
      }
    });
  for (auto& t : threads) t.join();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int node = 0; node < 2; ++node) out.status[static_cast<size_t>(node)] = reports[static_cast<size_t>(node)].status;
  out.variables = reports[0].variables;
  runtimes.clear();
  if (ended) ended(*faulty);
  faulty->close();
  transports[0]->close();
  return out;
}

// Picks node 1's `n`-th send to node 0 (counting only those with a slot's
// bytes when `with_body`).
FaultyTransport::DropPredicate nth(int n, bool with_body) {
  auto count = std::make_shared<std::atomic<int>>(0);
  return [count, n, with_body](int to, uint64_t, std::span<const std::byte> header, std::span<const std::byte> body) {
    if (to != 0) return false;
    if (with_body && body.empty() && header.size() < 100) return false;  // a bare ack or a small ready
    return ++*count == n;
  };
}

TEST_CASE("the data plane under faults: a delay changes nothing; every other fault is an error naming the link") {
  const std::string plan = pserver_plan();
  const Outcome clean = run_with(plan, [](FaultyTransport&) {});
  for (const Status& s : clean.status) REQUIRE_MESSAGE(s.ok(), s.to_string());
  REQUIRE(clean.variables.count("w") == 1);

  // A delay: tolerated, the same result bit for bit.
  const Outcome delayed = run_with(plan, [](FaultyTransport& t) { t.set_delay(std::chrono::milliseconds(2)); });
  for (const Status& s : delayed.status) CHECK_MESSAGE(s.ok(), s.to_string());
  REQUIRE(delayed.variables.count("w") == 1);
  CHECK(delayed.variables.at("w").values == clean.variables.at("w").values);

  struct Case {
    const char* name;
    Fault fault;
    bool with_body;
    const char* says;  // what node 0's error says
  };
  const Case cases[] = {
      {"drop", Fault::kDrop, false, "the link from node 1 to node 0: message 21 came where 20 was due (a message was lost)"},
      {"duplicate", Fault::kDuplicate, false, "message 20 came where 21 was due (a message came twice or out of order)"},
      {"swap", Fault::kSwap, false, "the link from node 1 to node 0: message 21 came where 20 was due"},
      {"corrupt a slot's bytes", Fault::kCorrupt, true, "the link from node 1 to node 0: regst"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Outcome faulted = run_with(plan, [&](FaultyTransport& t) { t.set_fault(c.fault, nth(20, c.with_body)); });
    CHECK(faulted.seconds < 4);  // found at once, not by the stall timeout
    INFO(faulted.status[0].to_string());
    CHECK(faulted.status[0].code() == Code::kDataLoss);
    CHECK(faulted.status[0].message().find(c.says) != std::string::npos);
    CHECK_FALSE(faulted.status[1].ok());  // stopped too
  }
  // A corrupted header: the message is refused whatever byte was hit.
  const Outcome header = run_with(plan, [](FaultyTransport& t) { t.set_fault(Fault::kCorrupt, nth(20, false)); });
  CHECK_FALSE(header.status[0].ok());
  CHECK(header.status[0].message().find("node 1") != std::string::npos);

  // A link cut silently (nothing arrives, nothing fails to send; on real
  // agents the transport sees the connection close and names the peer):
  // the stall timeout ends the run, naming what node 1 waits for from node 0.
  const Outcome cut = run_with(plan, [](FaultyTransport& t) { t.cut(0); });
  CHECK(cut.seconds < 15);
  INFO(cut.status[1].to_string());
  CHECK(cut.status[1].code() == Code::kDeadlineExceeded);
  CHECK(cut.status[1].message().find("waits for regst 'w.block0' from 0:") != std::string::npos);
  CHECK_FALSE(cut.status[0].ok());
}

TEST_CASE("a slot the wire still reads when its run ends is kept, not freed under it") {
  // ZeroMQ keeps a message queued on a connection that dropped and sends it
  // when it dials again, reading the slot it was given without a copy. The
  // run that sent it must not free that slot when it ends (freed, the
  // allocator writes its own links into the first bytes, and a large
  // buffer is unmapped).
  const std::string plan = pserver_plan();
  int64_t stuck = 0;
  bool intact = false;
  const Outcome out = run_with(
      plan, [](FaultyTransport& t) { t.set_fault(Fault::kStuck, nth(3, true)); },
      [&](FaultyTransport& t) {
        stuck = t.stuck();
        intact = t.stuck_bodies_intact();
      });
  CHECK_FALSE(out.status[0].ok());  // the message never came: named as lost
  CHECK(stuck == 1);
  CHECK(intact);
}

}  // namespace
}  // namespace rill
