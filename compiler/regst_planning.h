// Regst planning: completes each regst of a TaskGraph with its consumers
// (sorted, without repeats) and its register_num: 1 for a variable's model
// regst (so step i+1's forward waits for step i's update) and for a
// gradient read only on its way to its update (a variable, or boxings on
// the same node that lead only to variables), the activation
// count (>= 1) for everything else, which lets producers run that many steps
// ahead. A regst made once per micro-batch (K a step) gets its slots from the
// graph's schedule: under "gpipe" K, so a stage can run all of a step's
// forwards before the next stage's backwards give any back; under "1f1b" a
// forward tensor of stage s of S gets S - s (at least the activation count,
// at most K): the micro-batches stage s holds while the stages after it
// work, one forward then one backward each, so a stage's activation memory
// is bounded by the pipeline's depth, not by K; gradients flowing back get
// the activation count. A regst nobody reads is allowed. Pure; any thread.
#pragma once

#include "compiler/task_graph.h"

namespace rill::compiler {

Status plan_regsts(int activation_register_num, TaskGraph* graph);

// The register_num plan_regsts gives a non-model, non-control regst `r`.
int slots(const TaskGraph& graph, const RegstNode& r, int activation_register_num);

}  // namespace rill::compiler
