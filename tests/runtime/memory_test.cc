// Memory at run time: a node allocates each memory zone's block once
// (compiler/memory_plan.h) and refuses a plan that cannot fit before
// anything is allocated or run; a CPU-only process maps no CUDA library.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <string>
#include <tuple>

#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "kernels/cuda/cuda_context.h"
#include "runtime/cluster/job_runner.h"
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
  RunReport report = testing::run_wide_mlp(width, "cpu:1");
  REQUIRE_FALSE(report.status.ok());
  const std::string& message = report.status.message();
  INFO(message);
  CHECK(report.status.code() == Code::kFailedPrecondition);
  CHECK(has(message, "node 0: the plan does not fit host memory: it needs "));
  CHECK(has(message, "regst slots "));
  CHECK(has(message, " are available"));
  for (const char* remedy : {"train.zero", "pipeline.num_stages", "train.micro_batches"}) CHECK(has(message, remedy));
}

// Regsts that share bytes (train.reuse_memory, on by default) change no
// result: were any two of them live at once, one would overwrite the
// other's values and the losses would differ. Bitwise, since both runs do
// the same arithmetic in the same order; on two devices the threads race,
// so the schedules differ from run to run and from the one-device case.
TEST_CASE("regsts sharing bytes change no result: the same losses and variables bit for bit" *
          doctest::test_suite("blas_independent")) {
  struct Layout {
    const char* file;
    const char* devices;
    int64_t steps;
    int64_t micro_batches;  // 4: per micro-batch regsts of two slots share too
    // f16: loss scaling's updates read the gradient and the step's gate,
    // and the finished gradients share bytes too.
    graph::Precision precision = graph::Precision::kF32;
  };
  for (const Layout& layout : {Layout{"samples/gpt/gpt_moby.json", "cpu:1", 6, 1},
                               Layout{"samples/gpt/gpt_moby.json", "cpu:1", 4, 4},
                               Layout{"samples/gpt/gpt_moby_tp.json", "cpu:2", 6, 1},
                               Layout{"samples/gpt/gpt_moby.json", "cpu:1", 6, 1, graph::Precision::kF16},
                               Layout{"samples/mlp/mlp.json", "cpu:2", 30, 1}}) {
    CAPTURE(layout.file);
    CAPTURE(layout.devices);
    CAPTURE(layout.micro_batches);
    CAPTURE(std::string(graph::to_string(layout.precision)));
    graph::Job job = testing::training_sample(layout.file);
    job.train.micro_batches = layout.micro_batches;
    job.train.precision = layout.precision;
    JobResult shared = testing::run(job, layout.devices, layout.steps);
    job.train.reuse_memory = false;
    JobResult separate = testing::run(job, layout.devices, layout.steps);
    REQUIRE_MESSAGE(shared.status.ok(), shared.status.to_string());
    REQUIRE_MESSAGE(separate.status.ok(), separate.status.to_string());
    REQUIRE(shared.loss_curve.size() == static_cast<size_t>(layout.steps));
    CHECK(shared.loss_curve == separate.loss_curve);
    REQUIRE(shared.variables.size() == separate.variables.size());
    for (const auto& [name, value] : shared.variables) {
      CAPTURE(name);
      CHECK(value.values == separate.variables.at(name).values);
    }
  }
}

// Activation recompute (a repeated block's "recompute": graph/job.h Op)
// changes nothing but memory and time: the clones compute the same ops on
// the same values in the same layout, so the losses and variables are
// bitwise those of keeping the forward's values; with micro-batches and
// tensor parallel (heads split over 2 devices) too.
TEST_CASE("recompute changes no result: the same losses and variables bit for bit" *
          doctest::test_suite("blas_independent")) {
  for (const auto& [file, devices, steps, micro] : {std::tuple{"samples/gpt/gpt_moby.json", "cpu:1", 6, 1},
                                                    std::tuple{"samples/gpt/gpt_moby.json", "cpu:1", 4, 4},
                                                    std::tuple{"samples/gpt/gpt_moby_tp.json", "cpu:2", 6, 1}}) {
    CAPTURE(file);
    CAPTURE(micro);
    graph::Job job = testing::training_sample(file);
    job.train.micro_batches = micro;
    JobResult kept = testing::run(job, devices, steps);
    int grouped = 0;
    for (graph::Op& op : job.ops)  // as the block's "recompute" groups them: one group a layer
      if (op.name.size() > 2 && op.name[0] == 'h' && std::isdigit(static_cast<unsigned char>(op.name[1]))) {
        op.recompute = "h." + op.name.substr(1, op.name.find('.') - 1);
        ++grouped;
      }
    REQUIRE(grouped > 40);
    // Its plan recomputes: clones of each layer's ops, and copies of each
    // layer's input that wait for its output's gradient.
    auto cluster = compiler::parse_devices(devices, 1);
    REQUIRE(cluster.ok());
    auto plan = compiler::compile(job, *cluster, {});
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    int clones = 0, depends = 0;
    for (const plan::Task* t : *plan::GetPlan(plan->data())->tasks()) {
      const std::string name = t->name()->str();
      depends += name.rfind("recompute/", 0) == 0 && name.find("/depend") != std::string::npos;
      clones += name.rfind("recompute/h", 0) == 0 && name.find("/depend") == std::string::npos;
    }
    CHECK(depends >= 4);
    CHECK(clones >= 4 * 10);
    JobResult again = testing::run(job, devices, steps);
    REQUIRE_MESSAGE(kept.status.ok(), kept.status.to_string());
    REQUIRE_MESSAGE(again.status.ok(), again.status.to_string());
    REQUIRE(kept.loss_curve.size() == static_cast<size_t>(steps));
    CHECK(again.loss_curve == kept.loss_curve);
    REQUIRE(again.variables.size() == kept.variables.size());
    for (const auto& [name, value] : kept.variables) {
      CAPTURE(name);
      CHECK(value.values == again.variables.at(name).values);
    }
  }
}

// Whether this process has a CUDA library mapped.
bool maps_cuda() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (has(line, "libcudart") || has(line, "libcublas") || has(line, "librill_cuda")) return true;
  return false;
}

// CUDA lives in a module loaded when a process first asks for a GPU: a
// CPU-only run, its result and its counts never load it. In a child
// process, so that no other test of this program has loaded it first.
TEST_CASE("a job on cpu devices maps no CUDA library") {
  graph::Job job = testing::load_sample("samples/linear_regression/linear_regression.json");
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const bool before = maps_cuda();
    JobResult result = testing::run(job, "cpu:1", 20);
    const bool ran = result.status.ok() && result.device_synchronizes == 0 && CudaContext::device_bytes_peak() == 0;
    _exit(before ? 2 : !ran ? 3 : maps_cuda() ? 4 : 0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, "2: mapped before, 3: the job failed, 4: mapped after the job");
}

}  // namespace
}  // namespace rill
