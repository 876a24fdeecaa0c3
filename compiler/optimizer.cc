#include "compiler/optimizer.h"

#include "compiler/gradient_norm.h"

#include <fnmatch.h>

#include <algorithm>

namespace rill::compiler {
namespace {

// Whether an op, the loss, a metric or a fetch reads `tensor`.
bool read_by_any(const LogicalGraph& g, const std::string& tensor) {
  for (const OpNode& op : g.ops)
    if (std::find(op.inputs.begin(), op.inputs.end(), tensor) != op.inputs.end()) return true;
  auto named = [&](const Reported& r) { return r.tensor == tensor; };
  return g.loss == tensor || std::any_of(g.reported.begin(), g.reported.end(), named) ||
         std::any_of(g.fetched.begin(), g.fetched.end(), named);
}

}  // namespace

bool accumulates(const OpNode& op) { return op.attrs.get_int("micro_batches", 0) > 0; }

const char* update_op_of(const std::string& type) {
  if (type == "sgd") return "sgd_update";
  if (type == "momentum") return "momentum_update";
  if (type == "adam" || type == "adamw") return "adam_update";
  return nullptr;
}

Status attach_optimizer(const graph::Optimizer& optimizer, LogicalGraph* g) {
  if (update_op_of(optimizer.type) == nullptr)
    return invalid_argument("optimizer: unknown type '{}' (sgd, momentum, adam or adamw)", optimizer.type);
  const std::string update_op = update_op_of(optimizer.type);
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
  if (optimizer.type == "adamw") attrs.set("decoupled", int64_t{1});
  if (optimizer.warmup_steps > 0) attrs.set("warmup_steps", optimizer.warmup_steps);
  if (optimizer.decay_steps > 0) {
    attrs.set("decay_steps", optimizer.decay_steps);
    attrs.set("min_lr", optimizer.min_lr);
  }
  for (VariableNode& v : g->variables) {
    if (v.grad.empty()) continue;
    v.update_op = update_op;
    v.update_attrs = attrs;
    for (const std::string& pattern : optimizer.no_decay)
      if (fnmatch(pattern.c_str(), v.variable.name.c_str(), 0) == 0) v.update_attrs.set("weight_decay", 0.0);
    v.num_state = def->num_state;
    if (g->micro_batches > 1) {
      // Gradient accumulation: the update reads the mean of the step's
      // micro-batch gradients, summed where they are made (so what crosses
      // devices afterwards, once a step, is the accumulated gradient). A
      // gradient made by a matmul that nothing else reads is summed by the
      // matmul itself (C = A B / K + C after the first micro-batch: one pass
      // over C instead of three); any other gets an accumulate op.
      LogicalTensor* grad = g->find(v.grad);
      if (grad->origin == TensorOrigin::kOp && g->ops[static_cast<size_t>(grad->producer)].type == "matmul" &&
          !read_by_any(*g, v.grad)) {
        g->ops[static_cast<size_t>(grad->producer)].attrs.set("micro_batches", g->micro_batches);
        continue;
      }
      OpNode acc;
      acc.name = g->free_op_name(fmt::format("accumulate/{}", v.variable.name), 1);
      acc.type = "accumulate";
      acc.inputs = {v.grad};
      acc.outputs = {acc.name};
      acc.attrs = Attrs{{"micro_batches", g->micro_batches}};
      acc.output_hints.resize(1);
      acc.backward = true;
      acc.placement = grad->placement;
      v.grad = acc.name;
      RILL_RETURN_IF_ERROR(g->append_op(std::move(acc)));
    }
  }
  RILL_RETURN_IF_ERROR(finish_gradients(optimizer.clip_grad_norm, g));
  mark_per_micro(g);
  mark_stages(g);
  mark_after_updates(g);
  return {};
}

void mark_after_updates(LogicalGraph* g) {
  for (const VariableNode& v : g->variables)
    if (!v.update_op.empty()) g->find(v.variable.name)->after_updates = true;
  for (const OpNode& op : g->ops) {  // in topological order
    bool after = false;
    for (const std::string& in : op.inputs) after = after || g->find(in)->after_updates;
    for (const std::string& out : op.outputs) g->find(out)->after_updates = after;
  }
}

void mark_per_micro(LogicalGraph* g) {
  if (g->micro_batches <= 1) return;
  for (const InputNode& in : g->inputs) g->find(in.input.name)->per_micro = true;
  for (const OpNode& op : g->ops) {  // in topological order
    bool micro = false;
    if (!accumulates(op))
      for (const std::string& in : op.inputs) micro = micro || g->find(in)->per_micro;
    for (const std::string& out : op.outputs) g->find(out)->per_micro = micro;
  }
}

void mark_stages(LogicalGraph* g) {
  g->stages = 1;
  for (const InputNode& in : g->inputs) g->find(in.input.name)->stage = 0;
  for (const OpNode& op : g->ops) {  // in topological order
    if (op.backward) continue;
    int stage = -1;
    for (const std::string& name : op.inputs) {
      const LogicalTensor* in = g->find(name);
      if (in->stage >= 0) stage = std::max(stage, in->stage + (in->placement != op.placement ? 1 : 0));
    }
    for (const std::string& out : op.outputs) g->find(out)->stage = stage;
    g->stages = std::max(g->stages, stage + 1);
  }
}

}  // namespace rill::compiler
