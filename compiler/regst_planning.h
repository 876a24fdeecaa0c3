// Regst planning: completes each regst of a TaskGraph with its consumers
// (sorted, without repeats) and its register_num: 1 for a variable's model
// regst (so step i+1's forward waits for step i's update), the activation
// count (>= 1) for everything else, which lets producers run that many steps
// ahead; a regst made once per micro-batch gets at least one slot per
// micro-batch of a step, so a stage can run all of a step's forwards ahead
// of the next stage's backwards (GPipe's flow). A regst nobody reads is
// allowed. Pure; any thread.
#pragma once

#include "compiler/task_graph.h"

namespace rill::compiler {

Status plan_regsts(int activation_register_num, TaskGraph* graph);

}  // namespace rill::compiler
