// `linear`: y = x w (+ b) as the matmul and bias_add the long form writes
// (graph/job_expand.h).
#include "graph/job_expand.h"

namespace rill::graph {

StatusOr<std::vector<Op>> expand_linear(const Op& op) {
  if (op.inputs.size() != 2 && op.inputs.size() != 3)
    return invalid_argument("linear takes [x, w] or [x, w, b], got {} input(s)", op.inputs.size());
  if (!op.outputs.empty() && op.outputs != std::vector<std::string>{op.name})
    return invalid_argument("linear has one output, its name '{}'", op.name);
  Op matmul = op;
  matmul.type = "matmul";
  matmul.inputs = {op.inputs[0], op.inputs[1]};
  if (op.inputs.size() == 2) {
    matmul.outputs = {op.name};
    return std::vector<Op>{std::move(matmul)};
  }
  matmul.name = op.name + ".matmul";
  matmul.outputs = {matmul.name};
  matmul.output_sbp.clear();  // a hint is of the linear's output: the bias_add's
  Op bias = op;
  bias.type = "bias_add";
  bias.inputs = {matmul.name, op.inputs[2]};
  bias.outputs = {op.name};
  bias.attrs = {};
  return std::vector<Op>{std::move(matmul), std::move(bias)};
}

}  // namespace rill::graph
