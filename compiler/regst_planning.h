// Regst planning: completes each regst of a TaskGraph with its consumers
// (sorted, without repeats) and its register_num: 1 for a variable's model
// regst (so step i+1's forward waits for step i's update), the activation
// count (>= 1) for everything else, which lets producers run that many steps
// ahead. A regst nobody reads is allowed. Pure; any thread.
#pragma once

#include "compiler/task_graph.h"

namespace rill::compiler {

Status plan_regsts(int activation_register_num, TaskGraph* graph);

}  // namespace rill::compiler
