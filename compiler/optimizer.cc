#include "compiler/optimizer.h"

namespace rill::compiler {

Status attach_optimizer(const graph::Optimizer& optimizer, LogicalGraph* g) {
  std::string update_op;
  if (optimizer.type == "sgd") {
    update_op = "sgd_update";
  } else if (optimizer.type == "momentum") {
    update_op = "momentum_update";
  } else if (optimizer.type == "adam") {
    update_op = "adam_update";
  } else {
    return invalid_argument("optimizer: unknown type '{}' (sgd, momentum or adam)", optimizer.type);
  }
  const OpDef* def = find_op(update_op);
  if (def == nullptr || def->role != OpRole::kUpdate)
    return not_found("optimizer '{}': update op '{}' is not registered", optimizer.type, update_op);
  if (!(optimizer.lr > 0)) return invalid_argument("optimizer: lr is {}, expected > 0", optimizer.lr);
  Attrs attrs{{"lr", optimizer.lr},
              {"momentum", optimizer.momentum},
              {"beta1", optimizer.beta1},
              {"beta2", optimizer.beta2},
              {"epsilon", optimizer.epsilon},
              {"weight_decay", optimizer.weight_decay}};
  for (VariableNode& v : g->variables) {
    if (v.grad.empty()) continue;
    v.update_op = update_op;
    v.update_attrs = attrs;
    v.num_state = def->num_state;
  }
  return {};
}

}  // namespace rill::compiler
