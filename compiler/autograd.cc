#include "compiler/autograd.h"

#include <algorithm>
#include <map>
#include <set>

namespace rill::compiler {
namespace {

class Backward {
 public:
  explicit Backward(LogicalGraph* g) : g_(g) {}

  // Appends a backward op on `placement`; `base` names it ("grad/<forward op>/<type>").
  StatusOr<std::vector<std::string>> add_op(const std::string& base, const std::string& type,
                                            std::vector<std::string> inputs, Attrs attrs, int num_outputs,
                                            int placement) {
    OpNode op;
    op.placement = placement;
    op.name = g_->free_op_name(base, num_outputs);
    op.type = type;
    op.inputs = std::move(inputs);
    op.outputs = op_output_names(op.name, num_outputs);
    op.attrs = std::move(attrs);
    op.output_hints.resize(num_outputs);
    op.backward = true;
    std::vector<std::string> outputs = op.outputs;
    RILL_RETURN_IF_ERROR(g_->append_op(std::move(op)));
    return outputs;
  }

  void contribute(const std::string& tensor, const std::string& grad) { contributions_[tensor].push_back(grad); }

  // The gradient of `tensor` summed over its contributions, or "" if none.
  StatusOr<std::string> total(const std::string& tensor) {
    auto it = contributions_.find(tensor);
    if (it == contributions_.end() || it->second.empty()) return std::string();
    std::vector<std::string> parts = it->second;
    if (parts.size() == 1) return parts[0];
    const OpDef* add = find_op("add");
    if (add == nullptr) return not_found("summing the gradients of '{}' needs op 'add', which is not registered", tensor);
    std::string base = fmt::format("grad/{}/add", tensor);
    const int placement = g_->find(tensor)->placement;  // where the tensor and its gradient live
    std::string sum;
    if (add->num_inputs < 0) {
      RILL_ASSIGN_OR_RETURN(std::vector<std::string> out, add_op(base, "add", parts, {}, 1, placement));
      sum = out[0];
    } else {
      sum = parts[0];
      for (size_t i = 1; i < parts.size(); ++i) {
        RILL_ASSIGN_OR_RETURN(std::vector<std::string> out, add_op(base, "add", {sum, parts[i]}, {}, 1, placement));
        sum = out[0];
      }
    }
    it->second = {sum};
    return sum;
  }

  LogicalGraph* graph() { return g_; }

 private:
  LogicalGraph* g_;
  std::map<std::string, std::vector<std::string>> contributions_;
};

// What one gradient rule sees: a forward op, its output gradients, and the
// inputs that need a gradient. Errors from add_op are kept for after the rule.
class RuleBuilder final : public GradBuilder {
 public:
  RuleBuilder(Backward* backward, OpNode op, std::vector<std::string> output_grads, std::vector<bool> needs)
      : backward_(backward), op_(std::move(op)), output_grads_(std::move(output_grads)), needs_(std::move(needs)),
        input_grads_(op_.inputs.size()) {}

  const Attrs& attrs() const override { return op_.attrs; }
  int num_inputs() const override { return static_cast<int>(op_.inputs.size()); }
  const std::string& input(int i) const override { return op_.inputs.at(i); }
  const std::string& output(int i) const override { return op_.outputs.at(i); }
  const TensorMeta& meta(const std::string& tensor) const override {
    static const TensorMeta kNone;
    const LogicalTensor* t = backward_->graph()->find(tensor);
    if (t == nullptr) {
      note(not_found("gradient rule asked for the meta of unknown tensor '{}'", tensor));
      return kNone;
    }
    return t->meta;
  }
  std::string output_grad(int i) const override {
    return i >= 0 && i < static_cast<int>(output_grads_.size()) ? output_grads_[i] : std::string();
  }
  bool needs_input_grad(int i) const override { return i >= 0 && i < static_cast<int>(needs_.size()) && needs_[i]; }
  std::vector<std::string> add_op(const std::string& type, std::vector<std::string> inputs, Attrs attrs,
                                  int num_outputs) override {
    auto out = backward_->add_op(fmt::format("grad/{}/{}", op_.name, type), type, std::move(inputs),
                                 std::move(attrs), num_outputs, op_.placement);
    if (out.ok()) return std::move(out).value();
    note(out.status());
    return std::vector<std::string>(std::max(num_outputs, 0), std::string());
  }
  void set_input_grad(int i, const std::string& grad) override {
    if (i < 0 || i >= num_inputs()) {
      note(internal_error("gradient rule set the gradient of input {} of {}", i, num_inputs()));
      return;
    }
    input_grads_[i] = grad;
  }

  const Status& status() const { return status_; }
  const std::vector<std::string>& input_grads() const { return input_grads_; }

 private:
  void note(Status s) const {
    if (status_.ok()) status_ = std::move(s);
  }

  Backward* backward_;
  OpNode op_;
  std::vector<std::string> output_grads_;
  std::vector<bool> needs_;
  std::vector<std::string> input_grads_;
  mutable Status status_;
};

// Activation recompute (graph/job.h Op::recompute). For each group, the
// group's values that its own ops' gradient rules read (`rule_ops`: the
// backward ops each forward op's rule added) are made again: the group's
// ops that make them are cloned into the backward, reading the group's
// outside inputs through `depend` ops that wait for the gradient of the
// group's output, and the rules' ops read the clones. What the group hands
// on (a tensor an op outside it reads: the layer's output) is kept, so no
// gradient waits on itself. A clone has its op's attributes (a dropout's
// resolved seed: the same mask), SBP hints and placement, so it computes
// the same bits.
Status recompute_groups(LogicalGraph* g, Backward& backward, size_t num_forward,
                        std::vector<std::pair<size_t, size_t>> rule_ops) {
  std::map<std::string, std::vector<size_t>> groups;  // by name: forward op indices, in order
  for (size_t i = 0; i < num_forward; ++i)
    if (!g->ops[i].recompute.empty()) groups[g->ops[i].recompute].push_back(i);
  std::set<std::string> variables;
  for (const VariableNode& v : g->variables) variables.insert(v.variable.name);
  for (const auto& [name, members] : groups) {
    const std::set<size_t> in_group(members.begin(), members.end());
    std::set<std::string> made, kept;
    for (size_t i : members) {
      made.insert(g->ops[i].outputs.begin(), g->ops[i].outputs.end());
      // A mirrored job's collectives are made with the ranks' local shapes
      // (validate.cc): kept, never cloned.
      if (g->ops[i].def->role == OpRole::kCollective) kept.insert(g->ops[i].outputs.begin(), g->ops[i].outputs.end());
    }
    for (size_t i = 0; i < num_forward; ++i)
      if (!in_group.count(i))
        for (const std::string& in : g->ops[i].inputs)
          if (made.count(in)) kept.insert(in);
    if (made.count(g->loss)) kept.insert(g->loss);
    for (const Reported& r : g->reported) kept.insert(r.tensor);
    for (const Reported& f : g->fetched) kept.insert(f.tensor);
    // What the group's rules read of its values, and the group's ops that
    // make it (and what they read of the group's), latest first.
    std::set<std::string> wanted;
    for (size_t i : members)
      for (size_t b = rule_ops[i].first; b < rule_ops[i].second; ++b)
        for (const std::string& in : g->ops[b].inputs)
          if (made.count(in) && !kept.count(in)) wanted.insert(in);
    if (wanted.empty()) continue;
    std::vector<bool> clone(g->ops.size(), false);
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      const OpNode& op = g->ops[*it];
      bool needed = false;
      for (const std::string& out : op.outputs) needed = needed || wanted.count(out) != 0;
      if (!needed) continue;
      clone[*it] = true;
      for (const std::string& in : op.inputs)
        if (made.count(in) && !kept.count(in)) wanted.insert(in);
    }
    // Where the group's backward begins: its first rule op (the rules of
    // its last op, the first the reverse walk reached).
    size_t at = g->ops.size();
    for (size_t i : members)
      if (rule_ops[i].first < rule_ops[i].second) at = std::min(at, rule_ops[i].first);
    // The copies wait for the gradient of what the group hands on that
    // comes last before its backward begins (the layer's output's): one made
    // later would wait on the group's own backward.
    std::string after;
    int after_at = -1;
    for (const std::string& out : kept) {
      if (!made.count(out)) continue;
      RILL_ASSIGN_OR_RETURN(std::string grad, backward.total(out));
      const LogicalTensor* t = grad.empty() ? nullptr : g->find(grad);
      if (t == nullptr || t->origin != TensorOrigin::kOp) continue;
      if (t->producer < static_cast<int>(at) && t->producer > after_at) {
        after = grad;
        after_at = t->producer;
      }
    }
    if (after.empty()) continue;  // no gradient comes before the group's backward: its values are kept
    std::map<std::string, std::string> again;  // a group value -> its clone's
    std::map<std::string, std::string> waited;  // an outside input -> its copy after `after`
    const size_t appended = g->ops.size();
    for (size_t i : members) {
      if (!clone[i]) continue;
      const OpNode op = g->ops[i];  // a copy: g->ops grows
      std::vector<std::string> inputs;
      for (const std::string& in : op.inputs) {
        if (auto a = again.find(in); a != again.end()) {
          inputs.push_back(a->second);
        } else if (made.count(in) || variables.count(in)) {
          inputs.push_back(in);  // kept by the group, or a variable's value
        } else {
          auto [w, fresh] = waited.try_emplace(in);
          if (fresh) {
            RILL_ASSIGN_OR_RETURN(std::vector<std::string> copy,
                                  backward.add_op(fmt::format("recompute/{}/depend", in), "depend", {in, after}, {}, 1,
                                                  op.placement));
            w->second = copy[0];
          }
          inputs.push_back(w->second);
        }
      }
      RILL_ASSIGN_OR_RETURN(std::vector<std::string> outs,
                            backward.add_op(fmt::format("recompute/{}", op.name), op.type, std::move(inputs), op.attrs,
                                            static_cast<int>(op.outputs.size()), op.placement));
      g->ops.back().output_hints = op.output_hints;
      for (size_t k = 0; k < outs.size(); ++k) again[op.outputs[k]] = outs[k];
    }
    // Ops stay in topological order: the clones go right before the
    // group's first rule op (after the gradient they wait for), and what
    // moved is renumbered.
    const size_t added = g->ops.size() - appended;
    std::rotate(g->ops.begin() + static_cast<std::ptrdiff_t>(at), g->ops.begin() + static_cast<std::ptrdiff_t>(appended),
                g->ops.end());
    for (size_t k = at; k < g->ops.size(); ++k)
      for (const std::string& out : g->ops[k].outputs) g->find(out)->producer = static_cast<int>(k);
    for (auto& range : rule_ops)
      if (range.first >= at && range.first < range.second) {
        range.first += added;
        range.second += added;
      }
    for (size_t i : members)
      for (size_t b = rule_ops[i].first; b < rule_ops[i].second; ++b)
        for (std::string& in : g->ops[b].inputs)
          if (auto a = again.find(in); a != again.end()) in = a->second;
  }
  return {};
}

}  // namespace

Status build_backward(LogicalGraph* g) {
  std::set<std::string> requires_grad;
  for (const VariableNode& v : g->variables)
    if (v.variable.trainable) requires_grad.insert(v.variable.name);
  const size_t num_forward = g->ops.size();
  for (const OpNode& op : g->ops) {
    bool any = false;
    for (const std::string& in : op.inputs) any = any || requires_grad.count(in) != 0;
    if (any) requires_grad.insert(op.outputs.begin(), op.outputs.end());
  }
  if (requires_grad.count(g->loss) == 0) return {};  // nothing trainable reaches the loss

  // Tensors the loss depends on.
  std::set<std::string> to_loss = {g->loss};
  for (size_t i = num_forward; i-- > 0;) {
    const OpNode& op = g->ops[i];
    bool needed = false;
    for (const std::string& out : op.outputs) needed = needed || to_loss.count(out) != 0;
    if (needed) to_loss.insert(op.inputs.begin(), op.inputs.end());
  }

  Backward backward(g);
  RILL_ASSIGN_OR_RETURN(std::vector<std::string> seed,
                        backward.add_op(fmt::format("grad/{}/ones_like", g->loss), "ones_like", {g->loss}, {}, 1,
                                                        g->find(g->loss)->placement));
  if (g->mirrored) {
    // The objective is the mean of the ranks' losses: each rank's loss
    // enters with weight 1 / ranks, so summing the ranks' gradients (the
    // all-reduce of their P pieces) averages them, as DDP does.
    const int ranks = g->placement(g->find(g->loss)->placement).parallel();
    RILL_ASSIGN_OR_RETURN(seed, backward.add_op(fmt::format("grad/{}/rank_mean", g->loss), "scale", {seed[0]},
                                                {{"scale", 1.0 / ranks}}, 1, g->find(g->loss)->placement));
  }
  if (!g->loss_scale_state.empty()) {
    // Loss scaling (compiler/gradient_norm.h): the gradient starts at the scale.
    const int placement = g->find(g->loss)->placement;
    RILL_ASSIGN_OR_RETURN(std::vector<std::string> scale,
                          backward.add_op("loss_scale/scale", "loss_scale", {g->loss_scale_state},
                                          {{"scale", g->loss_scale_initial}}, 1, placement));
    g->loss_scale = scale[0];
    RILL_ASSIGN_OR_RETURN(seed, backward.add_op(fmt::format("grad/{}/scaled", g->loss), "mul", {seed[0], scale[0]},
                                                {}, 1, placement));
  }
  backward.contribute(g->loss, seed[0]);

  std::vector<std::pair<size_t, size_t>> rule_ops(num_forward);  // the backward ops each rule added
  for (size_t i = num_forward; i-- > 0;) {
    OpNode op = g->ops[i];  // a copy: rules append to g->ops
    std::vector<bool> needs(op.inputs.size());
    bool any_need = false;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      needs[k] = requires_grad.count(op.inputs[k]) != 0 && to_loss.count(op.inputs[k]) != 0;
      any_need = any_need || needs[k];
    }
    if (!any_need) continue;
    std::vector<std::string> output_grads;
    bool any_grad = false;
    for (const std::string& out : op.outputs) {
      RILL_ASSIGN_OR_RETURN(std::string grad, backward.total(out));
      any_grad = any_grad || !grad.empty();
      output_grads.push_back(grad);
    }
    if (!any_grad) continue;
    if (op.def->grad == nullptr)
      return invalid_argument("op '{}' ({}) lies between a trainable variable and the loss but has no gradient rule",
                              op.name, op.type);
    RuleBuilder rule(&backward, op, output_grads, needs);
    const size_t first = g->ops.size();
    Status s = op.def->grad(rule);
    rule_ops[i] = {first, g->ops.size()};
    if (s.ok()) s = rule.status();
    if (!s.ok()) return s.with_context(fmt::format("gradient of op '{}' ({})", op.name, op.type));
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const std::string& grad = rule.input_grads()[k];
      if (!needs[k] || grad.empty()) continue;
      const LogicalTensor* gt = g->find(grad);
      const LogicalTensor* xt = g->find(op.inputs[k]);
      if (gt == nullptr) return internal_error("gradient of op '{}' input {} names unknown tensor '{}'", op.name, k, grad);
      // A gradient has its input's shape and dtype, but one of a 16-bit
      // float is f32 (mixed precision: products of 16-bit values give f32,
      // and gradients stay in it).
      const bool widened = gt->meta.dtype == DType::kF32 && is_float(xt->meta.dtype);
      if (gt->meta.shape != xt->meta.shape || (gt->meta.dtype != xt->meta.dtype && !widened))
        return internal_error("gradient of op '{}' ({}) input {} is {} {}, the input {} {}", op.name, op.type, k,
                              dtype_name(gt->meta.dtype), shape_string(gt->meta.shape), dtype_name(xt->meta.dtype),
                              shape_string(xt->meta.shape));
      backward.contribute(op.inputs[k], grad);
    }
  }

  RILL_RETURN_IF_ERROR(recompute_groups(g, backward, num_forward, rule_ops));
  std::vector<std::string> roots;
  for (const Reported& r : g->reported) roots.push_back(r.tensor);
  for (const Reported& f : g->fetched) roots.push_back(f.tensor);  // fetched tensors need not reach the loss
  for (VariableNode& v : g->variables) {
    if (!v.variable.trainable || to_loss.count(v.variable.name) == 0) continue;
    RILL_ASSIGN_OR_RETURN(v.grad, backward.total(v.variable.name));
    if (v.grad.empty())
      return internal_error("variable '{}' feeds the loss but no gradient rule produced its gradient", v.variable.name);
    roots.push_back(v.grad);
  }
  g->prune(roots);
  return {};
}

}  // namespace rill::compiler
