// The compiler: turns a logical graph::Job into a physical Plan (compiler/plan.fbs)
// for a cluster. The passes, one per file, run in this order:
//   validate (validate.h) -> autograd (autograd.h) -> optimizer (optimizer.h)
//   -> SBP deduction (sbp_deduction.h) -> boxing insertion (boxing.h)
//   -> physical expansion into a task graph (physical.h) -> regst planning
//   (regst_planning.h) -> Plan bytes (plan_writer.h).
// The plan's bytes are all a runtime needs to build its actors, and the same job
// always compiles to the same bytes.
//
// Threading: every function here is pure (no shared state); call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/actor_id.h"
#include "base/status.h"
#include "compiler/plan_generated.h"
#include "graph/job.h"

namespace rill::compiler {

inline constexpr uint32_t kPlanVersion = 1;

// The devices a job runs on: num_nodes nodes with devices_per_node devices each.
// A device's rank is node * devices_per_node + device.
struct Cluster {
  int num_nodes = 1;
  int devices_per_node = 1;
  DeviceType device_type = DeviceType::kCpu;
  int parallel() const { return num_nodes * devices_per_node; }
};

// Parses a device list such as "cpu:2" or "cuda:4" (devices per node).
StatusOr<Cluster> parse_devices(const std::string& text, int num_nodes);

enum class Mode { kTrain, kEval };

struct CompileOptions {
  Mode mode = Mode::kTrain;         // kEval: forward only over job.eval's dataset
  int64_t steps = 0;                // > 0 overrides the job's steps
  int activation_register_num = 2;  // slots of every non-model regst (>= 1)
};

// Compiles `job` for `cluster`; returns the Plan's bytes (FlatBuffers, "RLPL").
StatusOr<std::string> compile(const graph::Job& job, const Cluster& cluster, const CompileOptions& options);

// Runs the FlatBuffers verifier over `bytes`, checks the version and the plan's
// internal references (regst ids, producers). The returned pointer points into
// `bytes`, which must outlive it.
StatusOr<const plan::Plan*> verify_plan(std::string_view bytes);

// A JSON summary: {"job", "steps", "tasks": [...], "regsts": [...]}.
std::string plan_json(const plan::Plan& plan);
// Graphviz: tasks as nodes clustered by node and thread, regsts as edges.
std::string plan_dot(const plan::Plan& plan);

}  // namespace rill::compiler
