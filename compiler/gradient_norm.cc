#include "compiler/gradient_norm.h"

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

Status report(LogicalGraph* g, const std::string& name, const std::string& tensor) {
  for (const Reported& r : g->reported)
    if (r.name == name)
      return invalid_argument("metric '{}': the name is loss scaling's (train.precision \"f16\" or train.loss_scale "
                              "reports it); name the metric otherwise",
                              name);
  g->reported.push_back({name, tensor});
  return {};
}

}  // namespace

double first_loss_scale(const graph::TrainConfig& train) { return train.loss_scale != 0 ? train.loss_scale : 65536.0; }

std::optional<graph::Variable> loss_scale_variable(const graph::TrainConfig& train) {
  if (train.precision != graph::Precision::kF16 && train.loss_scale == 0) return std::nullopt;
  graph::Variable state;
  state.name = "loss_scale_state";
  state.shape = {3};
  state.init.type = "fill";
  state.init.attrs.set("value", 0.0);
  state.trainable = false;
  return state;
}

Status add_loss_scale_state(const graph::TrainConfig& train, LogicalGraph* g) {
  std::optional<graph::Variable> made = loss_scale_variable(train);
  if (!made || g->loss.empty()) return {};
  const graph::Variable& state = *made;
  if (g->has_name(state.name))
    return invalid_argument("the name '{}' is loss scaling's (train.precision \"f16\" or train.loss_scale): name "
                            "the job's tensor or op otherwise",
                            state.name);
  const int placement = g->find(g->loss)->placement;
  g->tensors[state.name] = LogicalTensor{state.name,  TensorMeta{state.shape, DType::kF32}, TensorOrigin::kVariable,
                                         static_cast<int>(g->variables.size()), 0, NdSbp(Sbp::broadcast()),
                                         placement};
  VariableNode node;
  node.variable = state;
  node.placement = placement;
  g->variables.push_back(std::move(node));
  g->loss_scale_state = state.name;
  g->loss_scale_initial = first_loss_scale(train);
  g->loss_scale_window = train.loss_scale_window;
  return {};
}

Status finish_gradients(double max_norm, LogicalGraph* g) {
  const bool scaled = !g->loss_scale_state.empty();
  if (max_norm <= 0 && !scaled) return {};
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
      // which both its square sum and its finished copy read.
      VariableNode& var = g->variables[v];
      RILL_ASSIGN_OR_RETURN(auto reduced, add(g, fmt::format("grad_norm/{}/reduced", var.variable.name), "identity",
                                              {var.grad}, placement, {}, 1, var.sbp));
      var.grad = reduced[0];
      RILL_ASSIGN_OR_RETURN(auto sq, add(g, fmt::format("grad_norm/{}/sum_squares", var.variable.name),
                                         "sum_squares", {var.grad}, placement));
      squares.push_back(sq[0]);
    }
    RILL_ASSIGN_OR_RETURN(auto total, add(g, fmt::format("grad_norm/total{}", placement), "add_n", squares, placement,
                                          {}, 1, NdSbp(Sbp::broadcast())));
    totals.push_back(total[0]);
  }
  const int first = by_placement.begin()->first;
  std::string total = totals[0];
  if (totals.size() > 1) {
    RILL_ASSIGN_OR_RETURN(auto sum,
                          add(g, "grad_norm/total", "add_n", totals, first, {}, 1, NdSbp(Sbp::broadcast())));
    total = sum[0];
  }
  std::string factor, gate, norm_total = total;
  if (scaled) {
    const Attrs attrs{{"scale", g->loss_scale_initial}};
    RILL_ASSIGN_OR_RETURN(auto check, add(g, "loss_scale/check", "loss_scale_check", {total, g->loss_scale_state},
                                          first, attrs, 4, NdSbp(Sbp::broadcast())));
    factor = check[0];
    norm_total = check[1];
    gate = check[2];
    RILL_RETURN_IF_ERROR(report(g, "loss_scale", g->loss_scale));
    RILL_RETURN_IF_ERROR(report(g, "skipped_steps", check[3]));
    for (VariableNode& v : g->variables)
      if (v.variable.name == g->loss_scale_state) {
        v.grad = total;
        v.update_op = "loss_scale_update";
        v.update_attrs = Attrs{{"scale", g->loss_scale_initial}, {"window", g->loss_scale_window}};
        v.num_state = 0;
      }
  }
  if (max_norm > 0) {
    RILL_ASSIGN_OR_RETURN(auto clip, add(g, "clip/factor", "clip_factor", {norm_total}, first,
                                         {{"max_norm", max_norm}}, 2));
    if (factor.empty()) {
      factor = clip[0];
    } else {
      RILL_ASSIGN_OR_RETURN(auto both, add(g, "grad_norm/factor", "mul", {factor, clip[0]}, first));
      factor = both[0];
    }
  }
  for (const auto& [placement, vars] : by_placement)
    for (size_t v : vars) {
      VariableNode& var = g->variables[v];
      RILL_ASSIGN_OR_RETURN(auto finished, add(g, fmt::format("grad_norm/{}", var.variable.name), "mul",
                                               {var.grad, factor}, placement, {}, 1, var.sbp));
      var.grad = finished[0];
      var.gate = gate;
    }
  return {};
}

}  // namespace rill::compiler
