// The work of a boxing task of a plan: its BoxingPlan (kernels/
// boxing_plan.h), made from its conf and the regsts it reads and writes,
// checked against them. The node that runs the task (runtime/node/
// boxing_setup.h) and the memory plan that places its scratch both take it
// from here, so they agree. Pure; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "compiler/plan_generated.h"
#include "kernels/boxing_plan.h"

namespace rill::compiler {

struct BoxingTask {
  BoxingPlan plan;
  bool exchanges = false;  // a collective among nodes (the conf's peers)
  uint8_t reduce_op = 0;   // how P pieces combine: comm::ReduceOp's value (0 sum, 1 max, 2 min, 3 product)
  // >= 0: a device collective (plan.fbs BoxingConf.comm_group): input k is
  // all-reduced among the group's ranks into output k (or its rows
  // reduce-scattered, or gathered), in its device's memory, by the group's
  // communicator; `plan` is then empty (no steps, no scratch).
  int comm_group = -1;
  CollectiveCall call = CollectiveCall::kAllReduce;  // a device collective's (all-reduce, reduce-scatter, all-gather)
  std::vector<TensorMeta> tensors;  // a device collective's tensors (what its communicator works on), in input order
  std::vector<size_t> counts;       // a reduce-scatter's or all-gather's blocks (elements), by rank
  // Its split axis: the tensor seen as [outer, slices, slice] (elements),
  // rank r's block its counts[r] / (outer * slice) slices. outer 1: blocks
  // contiguous in the tensor (rows); else the body packs them.
  size_t outer = 1, slice = 1;
};

// Boxing task `task` of a verified plan (whole or node plan), or an error
// naming the task and what its conf and regsts disagree on.
StatusOr<BoxingTask> boxing_task(const plan::Plan& plan, const plan::Task& task);

}  // namespace rill::compiler
