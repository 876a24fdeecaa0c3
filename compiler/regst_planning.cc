#include "compiler/regst_planning.h"

#include <algorithm>

namespace rill::compiler {

Status plan_regsts(int activation_register_num, TaskGraph* g) {
  if (activation_register_num < 1)
    return invalid_argument("activation_register_num is {}, expected at least 1", activation_register_num);
  for (RegstNode& r : g->regsts) {
    r.consumers.clear();
    // Made once per micro-batch: a slot for each of the step's micro-batches,
    // so a stage can run all of a step's forwards before the next stage's
    // backwards give its slots back (GPipe's flow).
    r.register_num = r.is_model || r.ctrl ? 1 : std::max(activation_register_num, r.readies_per_step);
  }
  for (size_t t = 0; t < g->tasks.size(); ++t) {
    for (int regst : g->tasks[t].inputs) {
      if (regst < 0 || regst >= static_cast<int>(g->regsts.size()))
        return internal_error("task '{}' reads regst {} of {}", g->tasks[t].name, regst, g->regsts.size());
      g->regsts[regst].consumers.push_back(static_cast<int>(t));
    }
  }
  for (RegstNode& r : g->regsts) {
    std::sort(r.consumers.begin(), r.consumers.end());
    r.consumers.erase(std::unique(r.consumers.begin(), r.consumers.end()), r.consumers.end());
  }
  return {};
}

}  // namespace rill::compiler
