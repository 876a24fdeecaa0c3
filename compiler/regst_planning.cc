#include "compiler/regst_planning.h"

#include <algorithm>

namespace rill::compiler {

int slots(const TaskGraph& g, const RegstNode& r, int activation_register_num) {
  const int k = r.readies_per_step;
  if (k <= 1) return activation_register_num;
  if (g.schedule == "gpipe") return std::max(activation_register_num, k);
  // 1F1B: the forward pass's tensors at stage s wait for their backward
  // while the S - s - 1 stages after it work on later micro-batches.
  if (r.stage < 0) return activation_register_num;
  return std::min(k, std::max(activation_register_num, g.stages - r.stage));
}

Status plan_regsts(int activation_register_num, TaskGraph* g) {
  if (activation_register_num < 1)
    return invalid_argument("activation_register_num is {}, expected at least 1", activation_register_num);
  for (RegstNode& r : g->regsts) {
    r.consumers.clear();
    r.register_num = r.is_model || r.ctrl ? 1 : slots(*g, r, activation_register_num);
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
