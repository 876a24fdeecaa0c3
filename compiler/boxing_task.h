// The work of a boxing task of a plan: its BoxingPlan (kernels/
// boxing_plan.h), made from its conf and the regsts it reads and writes,
// checked against them. The node that runs the task (runtime/node/
// boxing_setup.h) and the memory plan that places its scratch both take it
// from here, so they agree. Pure; any thread.
#pragma once

#include <cstdint>
#include <optional>
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
  // all-reduced among the group's ranks into output k (or its blocks
  // reduce-scattered, gathered, or sent each to its rank), in its device's
  // memory, by the group's communicator; `plan` is then empty (no steps, no
  // scratch).
  int comm_group = -1;
  CollectiveCall call = CollectiveCall::kAllReduce;  // a device collective's
  std::vector<TensorMeta> tensors;  // a device collective's tensors (what its communicator works on), in input order
  // The blocks of its split side, along its split axis: a reduce-scatter's
  // input (the output is this rank's), an all-gather's output, an
  // all-to-all's input (block q goes to rank q); and an all-to-all's
  // output (block r from rank r), along the input's split axis.
  AxisBlocks blocks, received;
  // plan.fbs BoxingConf.own: its output (covering `output` of the logical
  // tensor) zeroed (`zero`), then (`copy`) what its input (covering `input`)
  // holds of it copied in; `plan` is then empty.
  struct OwnPiece {
    Region input, output;
    bool zero = false, copy = true;
    DType dtype = DType::kF32;
  };
  std::optional<OwnPiece> own;
};

// Boxing task `task` of a verified plan (whole or node plan), or an error
// naming the task and what its conf and regsts disagree on.
StatusOr<BoxingTask> boxing_task(const plan::Plan& plan, const plan::Task& task);

}  // namespace rill::compiler
