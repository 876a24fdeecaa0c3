// Plan writer: serializes a finished TaskGraph into the Plan's FlatBuffers
// bytes (compiler/plan.fbs, identifier "RLPL", version kPlanVersion). Every
// vector field is written, empty or not, so readers need no null checks.
// The bytes depend only on the TaskGraph. Pure; any thread.
#pragma once

#include <string>

#include "compiler/task_graph.h"

namespace rill::compiler {

std::string write_plan(const TaskGraph& graph);

}  // namespace rill::compiler
