// Steady-state acting allocates nothing in Rill: every C++ and C heap
// allocation of this test binary is counted (the replacements below hold
// for every file of the program), on one node and across two over ZeroMQ.
#include <doctest/doctest.h>

#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "comm/counting_transport.h"
#include "comm/transport.h"
#include "compiler/compiler.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/node/node_runtime.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

// Counts every C++ heap allocation in this test binary, on any thread. (GCC 12
// cannot see that these replacements pair malloc with free.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<int64_t> g_allocations{0};

// While armed, the call stacks of the first kTraced allocations, kept
// without allocating, so that a test that finds some can say where they
// came from (a libzmq frame names its library; the test's own frames are
// named too: the program exports its symbols).
namespace {
constexpr int kTraced = 4, kFrames = 32;
std::atomic<bool> g_tracing{false};
std::atomic<int> g_traced{0};
void* g_frames[kTraced][kFrames];
int g_depths[kTraced];
// backtrace() loads its unwinder on first use, which allocates: once here.
const int g_unwinder_loaded = [] {
  void* frames[2];
  return backtrace(frames, 2);
}();

void trace_allocations(bool on) {
  if (on) g_traced.store(0);
  g_tracing.store(on);
}

void print_traced_allocations() {
  const int traced = std::min(g_traced.load(), kTraced);
  for (int i = 0; i < traced; ++i) {
    std::fprintf(stderr, "allocation %d of %d while traced, from:\n", i + 1, g_traced.load());
    backtrace_symbols_fd(g_frames[i], g_depths[i], STDERR_FILENO);
  }
}
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (g_tracing.load(std::memory_order_relaxed)) {
    if (const int i = g_traced.fetch_add(1); i < kTraced) g_depths[i] = backtrace(g_frames[i], kFrames);
  }
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

// And every C heap allocation (libzmq's messages are malloc'd): glibc's
// allocator behind its public names, counted.
static std::atomic<int64_t> g_mallocs{0};
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* malloc(std::size_t size) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}
void* calloc(std::size_t n, std::size_t size) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t size) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, size);
}
}

namespace rill {
using testing::load_sample;

TEST_CASE("steady-state acting allocates nothing, on any thread") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  // cpu:2 has every actor kind: sources, compute, variables, boxing, sink.
  auto plan = compiler::compile(job, *compiler::parse_devices("cpu:2", 1), {});
  REQUIRE(plan.ok());
  int64_t at_step_50 = -1, at_step_450 = -1, mallocs_50 = -1, mallocs_450 = -1;
  RunOptions options;
  options.on_step = [&](const StepMetrics& m) {
    if (m.step == 50) at_step_50 = g_allocations.load(), mallocs_50 = g_mallocs.load(), trace_allocations(true);
    if (m.step == 450) trace_allocations(false), at_step_450 = g_allocations.load(), mallocs_450 = g_mallocs.load();
  };
  RunReport report = run_plan(*plan, options);
  REQUIRE_MESSAGE(report.status.ok(), report.status.to_string());
  REQUIRE(at_step_50 > 0);
  CHECK(at_step_450 == at_step_50);
  if (at_step_450 != at_step_50) print_traced_allocations();
  CHECK(mallocs_450 == mallocs_50);
}

// The same across two nodes over ZeroMQ (TCP on loopback): actor messages
// carrying regsts to the other node and the boxing's all-reduce. Rill's code
// allocates nothing per message (holders are recycled, mailbox queues are
// rings). libzmq does: its msg_t mallocs the buffer of every frame over 33
// bytes it is given to send (the public API takes a buffer of ours only as a
// constant, whose end of use it never reports, or with a free function, for
// which it mallocs a reference count instead), and on receipt a frame too
// large for its batch buffer, or a new batch buffer while the last is still
// referenced. A message is at most 2 frames, so libzmq's part is at most 3
// mallocs per message (1 to send, 2 to receive); Rill's part, counted
// exactly by operator new, must be 0. (libzmq's heartbeat timers use new
// every ping interval, so pings are set far apart here.)
TEST_CASE("steady-state acting across nodes over ZeroMQ allocates nothing in Rill, at most libzmq's frames") {
  graph::Job job = load_sample("samples/linear_regression/linear_regression.json");
  auto plan = compiler::compile(job, *compiler::parse_devices("cpu:2", 2), {});
  REQUIRE(plan.ok());
  std::vector<comm::Endpoint> endpoints = {{"127.0.0.1", 19545}, {"127.0.0.2", 19546}};
  std::vector<std::unique_ptr<comm::CountingTransport>> transports;
  comm::ZmqOptions zmq_options;
  zmq_options.heartbeat_interval = std::chrono::minutes(10);
  zmq_options.heartbeat_timeout = std::chrono::minutes(20);
  for (int node = 0; node < 2; ++node) {
    auto t = comm::make_zmq_transport(node, endpoints, zmq_options);
    REQUIRE_MESSAGE(t.ok(), t.status().to_string());
    transports.push_back(std::make_unique<comm::CountingTransport>(std::move(*t)));
  }
  struct Counts {
    int64_t news = -1, mallocs = -1, messages = -1;
  };
  auto take = [&] {
    return Counts{g_allocations.load(), g_mallocs.load(), transports[0]->sent_total() + transports[1]->sent_total()};
  };
  Counts at_50, at_450;
  testing::run_nodes(
      *plan, 2,
      [&](RunOptions& options) {
        if (options.node == 0)
          options.on_step = [&](const StepMetrics& m) {
            if (m.step == 50) at_50 = take(), trace_allocations(true);
            if (m.step == 450) trace_allocations(false), at_450 = take();
          };
      },
      {transports[0].get(), transports[1].get()});
  const int64_t messages = at_450.messages - at_50.messages;
  const int64_t mallocs = at_450.mallocs - at_50.mallocs;
  MESSAGE(messages, " messages between the nodes, ", mallocs, " mallocs (libzmq) in steps 50-450");
  REQUIRE(messages > 400);  // traffic every step
  CHECK(at_450.news == at_50.news);
  if (at_450.news != at_50.news) print_traced_allocations();
  CHECK(mallocs <= 3 * messages);
}

}  // namespace rill
