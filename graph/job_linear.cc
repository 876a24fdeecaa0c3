#include "graph/job_linear.h"

#include <fmt/format.h>

namespace rill::graph {

void expand_linear_ops(Job* job, check::Issues* issues, Origins* origins) {
  bool any = false;
  for (const Op& op : job->ops) any = any || op.type == "linear";
  if (!any) return;
  // Each op's origin as written, before the ops move.
  auto origin_of = [&](size_t k) {
    const std::string key = fmt::format("ops[{}]", k);
    auto it = origins->find(key);
    return it == origins->end() ? Origin{key, ""} : it->second;
  };
  std::vector<Op> ops;
  std::vector<Origin> from;
  for (size_t k = 0; k < job->ops.size(); ++k) {
    Op& op = job->ops[k];
    const Origin origin = origin_of(k);
    if (op.type != "linear") {
      ops.push_back(std::move(op));
      from.push_back(origin);
      continue;
    }
    const std::string where = fmt::format("ops[{}]", k);
    if (op.inputs.size() != 2 && op.inputs.size() != 3) {
      issues->add(where, "{}: linear takes [x, w] or [x, w, b], got {} input(s)", check::label("ops", k, op.name),
                  op.inputs.size());
      continue;
    }
    if (!op.outputs.empty() && op.outputs != std::vector<std::string>{op.name}) {
      issues->add(where, "{}: linear has one output, its name '{}'", check::label("ops", k, op.name), op.name);
      continue;
    }
    Op matmul = op;
    matmul.type = "matmul";
    matmul.inputs = {op.inputs[0], op.inputs[1]};
    if (op.inputs.size() == 2) {
      matmul.outputs = {op.name};
      ops.push_back(std::move(matmul));
      from.push_back(origin);
      continue;
    }
    matmul.name = op.name + ".matmul";
    matmul.outputs = {matmul.name};
    matmul.output_sbp.clear();  // a hint is of the linear's output: the bias_add's
    Op bias = op;
    bias.type = "bias_add";
    bias.inputs = {matmul.name, op.inputs[2]};
    bias.outputs = {op.name};
    bias.attrs = {};
    ops.push_back(std::move(matmul));
    from.push_back(origin);
    ops.push_back(std::move(bias));
    from.push_back(origin);
  }
  job->ops = std::move(ops);
  for (auto it = origins->begin(); it != origins->end();)
    it = it->first.rfind("ops[", 0) == 0 ? origins->erase(it) : std::next(it);
  for (size_t k = 0; k < from.size(); ++k) {
    const std::string expanded = fmt::format("ops[{}]", k);
    if (from[k].path != expanded) (*origins)[expanded] = from[k];
  }
}

}  // namespace rill::graph
