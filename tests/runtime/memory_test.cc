// Memory planning at run time: a node allocates each memory zone's block
// once (compiler/memory_plan.h) and refuses a plan that cannot fit before
// anything is allocated or run.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/node/node_runtime.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

int64_t available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("a plan that cannot fit this machine's memory is refused before it runs, with its figures") {
  // The wide MLP at width W: w2 alone holds W^2 floats, and its gradient as
  // many. W = 80,000 (25.6 GB each) or wider, until w2 is twice what this
  // machine has available, so the refusal does not depend on the machine.
  const int64_t available = available_bytes();
  REQUIRE(available > 0);
  int64_t width = 80000;
  while (width * width * 4 < 2 * available) width += 10000;
  auto loaded = graph::load_job_file(testing::source_path("bench/mlp_wide_synthetic.json"));
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  graph::Job job = *loaded;
  for (graph::Variable& v : job.variables)
    for (int64_t& d : v.shape)
      if (d == 4096) d = width;
  auto cluster = compiler::parse_devices("cpu:1", 1);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  RunReport report = run_plan(*plan, {});
  REQUIRE_FALSE(report.status.ok());
  const std::string& message = report.status.message();
  INFO(message);
  CHECK(report.status.code() == Code::kFailedPrecondition);
  CHECK(has(message, "node 0: the plan does not fit host memory: it needs "));
  CHECK(has(message, "regst slots "));
  CHECK(has(message, " are available"));
  for (const char* remedy : {"train.zero", "pipeline.num_stages", "train.micro_batches"}) CHECK(has(message, remedy));
}

}  // namespace
}  // namespace rill
