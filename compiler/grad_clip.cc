#include "compiler/grad_clip.h"

#include <map>
#include <optional>

namespace rill::compiler {
namespace {

// Appends a backward op of `type` on `placement`; returns its outputs.
StatusOr<std::vector<std::string>> add(LogicalGraph* g, const std::string& base, const std::string& type,
                                       std::vector<std::string> inputs, int placement, Attrs attrs = {},
                                       int num_outputs = 1, std::optional<NdSbp> hint = std::nullopt) {
  OpNode op;
  op.name = g->free_op_name(base, num_outputs);
  op.type = type;
  op.inputs = std::move(inputs);
  op.outputs = op_output_names(op.name, num_outputs);
  op.attrs = std::move(attrs);
  op.output_hints.resize(static_cast<size_t>(num_outputs));
  op.output_hints[0] = hint;
  op.backward = true;
  op.placement = placement;
  std::vector<std::string> outputs = op.outputs;
  RILL_RETURN_IF_ERROR(g->append_op(std::move(op)));
  return outputs;
}

}  // namespace

Status clip_gradients(double max_norm, LogicalGraph* g) {
  std::map<int, std::vector<size_t>> by_placement;  // trained variables by their gradient's placement
  for (size_t v = 0; v < g->variables.size(); ++v)
    if (!g->variables[v].grad.empty() && !g->variables[v].update_op.empty())
      by_placement[g->find(g->variables[v].grad)->placement].push_back(v);
  if (by_placement.empty()) return {};
  std::vector<std::string> totals;
  for (const auto& [placement, vars] : by_placement) {
    std::vector<std::string> squares;
    for (size_t v : vars) {
      // The gradient as its update reads it (summed across devices, as the
      // variable lies: one bucketed all-reduce for a replicated variable),
      // which both its square sum and its clipped copy read.
      VariableNode& var = g->variables[v];
      RILL_ASSIGN_OR_RETURN(auto reduced, add(g, fmt::format("clip/{}/reduced", var.variable.name), "identity",
                                              {var.grad}, placement, {}, 1, var.sbp));
      var.grad = reduced[0];
      RILL_ASSIGN_OR_RETURN(auto sq, add(g, fmt::format("clip/{}/sum_squares", var.variable.name), "sum_squares",
                                         {var.grad}, placement));
      squares.push_back(sq[0]);
    }
    RILL_ASSIGN_OR_RETURN(auto total, add(g, fmt::format("clip/total{}", placement), "add_n", squares, placement, {},
                                          1, NdSbp(Sbp::broadcast())));
    totals.push_back(total[0]);
  }
  const int first = by_placement.begin()->first;
  std::string total = totals[0];
  if (totals.size() > 1) {
    RILL_ASSIGN_OR_RETURN(auto sum, add(g, "clip/total", "add_n", totals, first, {}, 1, NdSbp(Sbp::broadcast())));
    total = sum[0];
  }
  RILL_ASSIGN_OR_RETURN(auto factor, add(g, "clip/factor", "clip_factor", {total}, first, {{"max_norm", max_norm}}, 2));
  for (const auto& [placement, vars] : by_placement)
    for (size_t v : vars) {
      VariableNode& var = g->variables[v];
      RILL_ASSIGN_OR_RETURN(auto clipped, add(g, fmt::format("clip/{}", var.variable.name), "mul",
                                              {var.grad, factor[0]}, placement, {}, 1, var.sbp));
      var.grad = clipped[0];
    }
  return {};
}

}  // namespace rill::compiler
