#include "compiler/logical_graph.h"

namespace rill::compiler {

std::vector<std::string> op_output_names(const std::string& op, int count) {
  if (count == 1) return {op};
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back(fmt::format("{}:{}", op, i));
  return names;
}

std::string LogicalGraph::free_op_name(const std::string& base, int num_outputs) const {
  for (int k = 0;; ++k) {
    std::string name = k == 0 ? base : fmt::format("{}_{}", base, k);
    bool free = !has_name(name);
    for (const std::string& out : op_output_names(name, num_outputs)) free = free && !has_name(out);
    if (free) return name;
  }
}

bool LogicalGraph::has_name(const std::string& name) const {
  return tensors.count(name) != 0 || op_names.count(name) != 0;
}

int LogicalGraph::place(const graph::Placement& p) {
  for (size_t i = 0; i < placements.size(); ++i)
    if (placements[i] == p) return static_cast<int>(i);
  placements.push_back(p);
  return static_cast<int>(placements.size()) - 1;
}

const TensorMeta& boxed_meta(const LogicalGraph& g, const BoxingNode& box) {
  return box.as ? *box.as : g.find(box.tensor)->meta;
}

Status LogicalGraph::append_op(OpNode op, const std::vector<TensorMeta>* outputs) {
  if (op.def == nullptr) op.def = find_op(op.type);
  if (op.def == nullptr) return not_found("op '{}': unknown op type '{}'", op.name, op.type);
  if (op_names.count(op.name) != 0) return invalid_argument("op name '{}' is used twice", op.name);
  std::vector<TensorMeta> in_metas;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const LogicalTensor* t = find(op.inputs[i]);
    if (t == nullptr) return not_found("op '{}' input {}: unknown tensor '{}'", op.name, i, op.inputs[i]);
    in_metas.push_back(t->meta);
  }
  std::vector<TensorMeta> out_metas;
  if (outputs != nullptr) {
    out_metas = *outputs;
  } else {
    Status s = infer_op(*op.def, op.attrs, in_metas, &out_metas);
    if (!s.ok()) return s.with_context(fmt::format("op '{}'", op.name));
  }
  if (op.outputs.size() != out_metas.size())
    return invalid_argument("op '{}' ({}) names {} output(s), the op has {}", op.name, op.type, op.outputs.size(),
                            out_metas.size());
  int index = static_cast<int>(ops.size());
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    const std::string& name = op.outputs[i];
    if (name.empty()) return invalid_argument("op '{}' output {} has no name", op.name, i);
    if (tensors.count(name) != 0) return invalid_argument("op '{}' output '{}': tensor name is used twice", op.name, name);
    tensors[name] = LogicalTensor{name, out_metas[i], TensorOrigin::kOp, index, static_cast<int>(i), {}, op.placement};
  }
  op_names.insert(op.name);
  ops.push_back(std::move(op));
  return {};
}

void LogicalGraph::prune(const std::vector<std::string>& roots) {
  // Mark backwards from the roots; ops come in topological order, so one
  // reverse sweep reaches every ancestor.
  std::set<std::string> needed(roots.begin(), roots.end());
  std::vector<bool> keep_op(ops.size(), false);
  for (size_t i = ops.size(); i-- > 0;) {
    for (const std::string& out : ops[i].outputs)
      if (needed.count(out) != 0) keep_op[i] = true;
    if (keep_op[i]) needed.insert(ops[i].inputs.begin(), ops[i].inputs.end());
  }

  std::vector<OpNode> kept_ops;
  std::vector<int> op_map(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!keep_op[i]) {
      op_names.erase(ops[i].name);
      continue;
    }
    op_map[i] = static_cast<int>(kept_ops.size());
    kept_ops.push_back(std::move(ops[i]));
  }
  ops = std::move(kept_ops);

  std::vector<int> input_map(inputs.size(), -1);
  std::vector<InputNode> kept_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (needed.count(inputs[i].input.name) == 0) continue;
    input_map[i] = static_cast<int>(kept_inputs.size());
    kept_inputs.push_back(std::move(inputs[i]));
  }
  inputs = std::move(kept_inputs);

  std::vector<int> variable_map(variables.size(), -1);
  std::vector<VariableNode> kept_variables;
  for (size_t i = 0; i < variables.size(); ++i) {
    if (needed.count(variables[i].variable.name) == 0) continue;
    variable_map[i] = static_cast<int>(kept_variables.size());
    kept_variables.push_back(std::move(variables[i]));
  }
  variables = std::move(kept_variables);

  for (auto it = tensors.begin(); it != tensors.end();) {
    LogicalTensor& t = it->second;
    const std::vector<int>& map = t.origin == TensorOrigin::kOp         ? op_map
                                  : t.origin == TensorOrigin::kInput    ? input_map
                                                                        : variable_map;
    t.producer = map[t.producer];
    if (t.producer < 0) {
      it = tensors.erase(it);
    } else {
      ++it;
    }
  }

  std::vector<graph::Dataset> kept_datasets;
  for (graph::Dataset& d : datasets) {
    bool used = false;
    for (const InputNode& in : inputs) used = used || in.dataset == d.name;
    if (used) kept_datasets.push_back(std::move(d));
  }
  datasets = std::move(kept_datasets);
}

}  // namespace rill::compiler
