#include "compiler/ring_expansion.h"

#include <algorithm>
#include <utility>

namespace rill::compiler {

int ring_source(const Shape& logical, const NdSbp& sbp, const graph::Placement& p, int axis, int rank, int steps) {
  const auto a = static_cast<size_t>(axis);
  const Region own = piece_region(logical, sbp, p.num_nodes(), p.per_node(), rank);
  const int64_t length = logical[a], cut = own.extent[a];
  Region want = own;
  want.origin[a] = ((own.origin[a] - steps * cut) % length + length) % length;
  if (want == own) return rank;
  int found = -1;
  for (int r = 0; r < p.parallel(); ++r) {
    if (!(piece_region(logical, sbp, p.num_nodes(), p.per_node(), r) == want)) continue;
    if (p.node_of(r) == p.node_of(rank)) return r;
    if (found < 0) found = r;
  }
  return found;
}

namespace {

// Appends the ops one ring op becomes, each on its placement and in its
// signature, their tensors made as its outputs were (per micro-batch,
// stage, ...).
class RingBuilder {
 public:
  RingBuilder(LogicalGraph* g, const OpNode& op, LogicalTensor like) : g_(*g), op_(op), like_(std::move(like)) {}

  // An op of `type` on `inputs` (each read `steps` places back; empty: its
  // own), named after the ring op; `names`: its outputs' names, else fresh.
  StatusOr<std::vector<std::string>> add(const std::string& type, std::vector<std::string> inputs,
                                         std::vector<int> steps, const Attrs& attrs, int outputs,
                                         std::vector<std::string> names = {}) {
    OpNode node;
    node.name = g_.free_op_name(fmt::format("{}.ring{}", op_.name, count_++), outputs);
    node.type = type;
    node.inputs = std::move(inputs);
    // `names`: the outputs' names ("" for a fresh one), else all fresh.
    node.outputs = op_output_names(node.name, outputs);
    for (size_t k = 0; k < names.size() && k < node.outputs.size(); ++k)
      if (!names[k].empty()) node.outputs[k] = names[k];
    node.attrs = attrs;
    node.backward = op_.backward;
    node.placement = op_.placement;
    node.recompute = op_.recompute;
    node.input_sbp.assign(node.inputs.size(), sbp());
    node.output_sbp.assign(node.outputs.size(), sbp());
    node.ring_axis = axis();
    node.ring_steps = std::move(steps);
    node.output_hints.resize(node.outputs.size());
    const std::vector<std::string> made = node.outputs;
    RILL_RETURN_IF_ERROR(g_.append_op(std::move(node)));
    for (const std::string& t : made) {
      LogicalTensor* tensor = g_.find(t);
      tensor->sbp = sbp();
      tensor->per_micro = like_.per_micro;
      tensor->stage = like_.stage;
      tensor->after_updates = like_.after_updates;
    }
    return made;
  }

  const NdSbp& sbp() const { return op_.input_sbp[0]; }
  // The sequence's axis in q (and k, v, y, dq, ...); lse's last.
  int axis() const { return static_cast<int>(g_.find(op_.inputs[0])->meta.shape.size()) - 2; }

 private:
  LogicalGraph& g_;
  const OpNode& op_;
  const LogicalTensor like_;
  int count_ = 0;
};

// attention(q, k, v) -> (y, lse): step r reads k and v r places back and
// folds its part into the steps' before (attention_step).
Status expand_attention(RingBuilder& b, const OpNode& op, int places) {
  const std::vector<std::string>& in = op.inputs;
  RILL_ASSIGN_OR_RETURN(std::vector<std::string> acc, b.add("attention", in, {0, 0, 0}, op.attrs, 2));
  for (int r = 1; r < places; ++r) {
    RILL_ASSIGN_OR_RETURN(acc, b.add("attention_step", {in[0], in[1], in[2], acc[0], acc[1]}, {0, r, r, 0, 0}, op.attrs,
                                     2, r + 1 == places ? op.outputs : std::vector<std::string>{}));
  }
  return {};
}

// attention_grad(q, k, v, y, lse, dy) -> (dq, dk, dv): step r's gradients
// against k and v read r places back, dq summed step by step where it is
// (attention_grad_step), dk and dv summed as they travel back round the ring.
Status expand_attention_grad(RingBuilder& b, const OpNode& op, int places) {
  auto named = [&](size_t k, bool final) {
    return final ? std::vector<std::string>{op.outputs[k]} : std::vector<std::string>{};
  };
  std::vector<std::vector<std::string>> steps;
  RILL_ASSIGN_OR_RETURN(std::vector<std::string> first,
                        b.add("attention_grad", op.inputs, {0, 0, 0, 0, 0, 0}, op.attrs, 3));
  steps.push_back(std::move(first));
  for (int r = 1; r < places; ++r) {
    std::vector<std::string> in = op.inputs;
    in.push_back(steps.back()[0]);
    RILL_ASSIGN_OR_RETURN(
        std::vector<std::string> g,
        b.add("attention_grad_step", std::move(in), {0, r, r, 0, 0, 0, 0}, op.attrs, 3,
              r + 1 == places ? std::vector<std::string>{op.outputs[0], "", ""} : std::vector<std::string>{}));
    steps.push_back(std::move(g));
  }
  // dk, dv: step r's part belongs to the piece r places back. The sum
  // starts at step 1's and moves one place on at each step after (each
  // device reading its neighbour's sum, which was for the piece it reads
  // now), ending, one place on from step P - 1, at the piece's own device
  // with step 0's part.
  for (size_t k = 1; k <= 2; ++k) {
    std::string sum = steps[1][k];
    for (int r = 2; r <= places; ++r) {
      const std::string& part = steps[static_cast<size_t>(r % places)][k];
      RILL_ASSIGN_OR_RETURN(auto next, b.add("add", {sum, part}, {1, 0}, {}, 1, named(k, r == places)));
      sum = next[0];
    }
  }
  return {};
}

// How many places the ring of `op` has: the pieces its q is cut into along
// the sequence, each the same length, and its k's alike (SBP deduction
// offers a ring only so: ring_fits in sbp_deduction.cc).
StatusOr<int> ring_places(const LogicalGraph& g, const OpNode& op, int axis) {
  const graph::Placement& p = g.placement(op.placement);
  const Shape& shape = g.find(op.inputs[0])->meta.shape;
  const auto a = static_cast<size_t>(axis);
  const int64_t cut = piece_region(shape, op.input_sbp[0], p.num_nodes(), p.per_node(), 0).extent[a];
  const Shape& keys = g.find(op.inputs[1])->meta.shape;
  for (int r = 0; r < p.parallel(); ++r)
    if (piece_region(shape, op.input_sbp[0], p.num_nodes(), p.per_node(), r).extent[a] != cut || cut == 0 ||
        piece_region(keys, op.input_sbp[0], p.num_nodes(), p.per_node(), r).extent[a] != cut)
      return invalid_argument(
          "op '{}' ({}): ring attention cuts the queries {} and keys {} into pieces of one length, but {} over {} "
          "devices does not",
          op.name, op.type, shape_string(shape), shape_string(keys), op.input_sbp[0].to_string(), p.parallel());
  for (size_t k = 0; k < op.inputs.size(); ++k) {
    const LogicalTensor* t = g.find(op.inputs[k]);
    if (t->placement != op.placement || !(t->sbp == op.input_sbp[0]) || !(op.input_sbp[k] == op.input_sbp[0]))
      return internal_error("op '{}': ring input '{}' lies {} on placement {}, not {} where the op runs", op.name,
                            t->name, t->sbp.to_string(), t->placement, op.input_sbp[0].to_string());
  }
  return static_cast<int>(shape[a] / cut);
}

}  // namespace

Status expand_rings(LogicalGraph* g) {
  if (std::none_of(g->ops.begin(), g->ops.end(), [](const OpNode& op) { return op.ring; })) return {};
  std::vector<OpNode> old = std::move(g->ops);
  g->ops.clear();
  g->ops.reserve(old.size());
  for (OpNode& op : old) {
    const int axis = op.ring ? static_cast<int>(g->find(op.inputs[0])->meta.shape.size()) - 2 : 0;
    int places = 1;
    if (op.ring) {
      RILL_ASSIGN_OR_RETURN(places, ring_places(*g, op, axis));
    }
    if (places == 1) {  // not a ring after all: the kernel's own
      op.ring = false;
      for (size_t k = 0; k < op.outputs.size(); ++k) g->find(op.outputs[k])->producer = static_cast<int>(g->ops.size());
      g->ops.push_back(std::move(op));
      continue;
    }
    LogicalTensor like = *g->find(op.outputs[0]);
    for (const std::string& out : op.outputs) g->tensors.erase(out);
    g->op_names.erase(op.name);
    RingBuilder builder(g, op, std::move(like));
    Status s = op.type == "attention"        ? expand_attention(builder, op, places)
               : op.type == "attention_grad" ? expand_attention_grad(builder, op, places)
                                             : internal_error("op '{}': no ring for op type '{}'", op.name, op.type);
    if (!s.ok()) return s.with_context(fmt::format("ring attention of op '{}'", op.name));
  }
  return {};
}

}  // namespace rill::compiler
