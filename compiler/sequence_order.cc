// The forward walk of sequence_order.h: op by op in the graph's order, the
// axis each output holds the sequence on, from the axes of its inputs, by
// what each kind of op does with places.
#include "compiler/sequence_order.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace rill::compiler {
namespace {

bool causal(const OpNode& op) { return op.attrs.get_int("causal", 0) != 0; }

const std::set<std::string> kElementwise = {"add",   "sub",  "mul",     "add_n",   "identity", "relu", "gelu",
                                            "gelu_tanh", "tanh", "sigmoid", "scale", "cast",     "dropout"};

class Walk {
 public:
  Walk(const LogicalGraph& g, int64_t length) : g_(g), length_(length) {}

  SequenceOrder out;

  int axis_of(const std::string& tensor) const {
    auto it = out.axis.find(tensor);
    return it == out.axis.end() ? -1 : it->second;
  }
  const Shape& shape(const std::string& tensor) const { return g_.find(tensor)->meta.shape; }

  void refuse(const std::string& why) {
    if (out.refused.empty()) out.refused = why;
  }

  // Input `k` of `op` must hold the sequence on `want` (-1: nowhere) where
  // its axis `want` has the sequence's length; a tensor of the natural
  // order there is a mix.
  void expect(const OpNode& op, size_t k, int want) {
    const std::string& t = op.inputs[k];
    const int have = axis_of(t);
    if (have == want) return;
    const Shape& s = shape(t);
    if (have < 0 && (want < 0 || want >= static_cast<int>(s.size()) || s[static_cast<size_t>(want)] != length_)) return;
    refuse(fmt::format("op '{}' ({}) reads '{}' with its sequence on axis {} where its other inputs need it on {}",
                       op.name, op.type, t, have, want));
  }

  void set(const std::string& tensor, int axis) {
    if (axis >= 0) out.axis[tensor] = axis;
  }

  void op(const OpNode& op);

 private:
  void elementwise(const OpNode& op, int ordered_input);
  const LogicalGraph& g_;
  const int64_t length_;
};

void Walk::elementwise(const OpNode& op, int k) {
  const int rank = static_cast<int>(shape(op.outputs[0]).size());
  const int out_axis = axis_of(op.inputs[static_cast<size_t>(k)]) + rank -
                       static_cast<int>(shape(op.inputs[static_cast<size_t>(k)]).size());
  for (size_t i = 0; i < op.inputs.size(); ++i)
    expect(op, i, out_axis - (rank - static_cast<int>(shape(op.inputs[i]).size())));
  set(op.outputs[0], out_axis);
}

void Walk::op(const OpNode& op) {
  int k = -1;  // an input in the new order
  for (size_t i = 0; i < op.inputs.size() && k < 0; ++i)
    if (axis_of(op.inputs[i]) >= 0) k = static_cast<int>(i);
  const bool attention = op.type == "attention" || op.type == "attention_grad";
  if (k < 0) {
    if (attention && causal(op))
      refuse(fmt::format("op '{}' (causal attention) reads a sequence that no mark puts in order", op.name));
    return;
  }
  const int a = axis_of(op.inputs[static_cast<size_t>(k)]);
  const Shape& x = shape(op.inputs[static_cast<size_t>(k)]);
  const int rank = static_cast<int>(x.size());
  if (kElementwise.count(op.type) != 0) return elementwise(op, k);
  if (op.type == "bias_add" || op.type == "bias_gelu_tanh") {
    const Shape& b = shape(op.inputs[1]);
    const int start = op.type == "bias_add" && op.attrs.has("axis") ? static_cast<int>(op.attrs.get_int("axis", 0))
                                                                     : static_cast<int>(shape(op.inputs[0]).size() -
                                                                                        b.size());
    const int xa = axis_of(op.inputs[0]) >= 0 ? axis_of(op.inputs[0]) : axis_of(op.inputs[1]) + start;
    expect(op, 0, xa);
    expect(op, 1, xa - start);
    return set(op.outputs[0], xa);
  }
  if (op.type == "layer_norm") {
    if (k != 0 || a == rank - 1) return refuse(fmt::format("op '{}' normalizes along the sequence", op.name));
    for (const std::string& o : op.outputs) set(o, a);
    return;
  }
  if (op.type == "softmax") return set(op.outputs[0], a);  // any axis: each row's order is kept
  if (op.type == "matmul") {
    // Rows of a (M, or a leading axis) keep their places; a batched b's
    // leading axes pair with a's, a shared b [K, N] has none.
    if (k != 0 || op.attrs.get_int("transpose_a", 0) != 0 || op.attrs.get_int("fold_batch", 0) != 0 || a >= rank - 1)
      return refuse(fmt::format("op '{}' (matmul) contracts or mixes the sequence's places", op.name));
    if (static_cast<int>(shape(op.inputs[1]).size()) == rank && a < rank - 2)
      expect(op, 1, a);
    else if (axis_of(op.inputs[1]) >= 0)
      return refuse(fmt::format("op '{}' (matmul) contracts or mixes the sequence's places", op.name));
    return set(op.outputs[0], a);
  }
  if (op.type == "reshape") {
    const Shape& y = shape(op.outputs[0]);
    const int64_t before = std::accumulate(x.begin(), x.begin() + a, int64_t{1}, std::multiplies<>());
    int64_t product = 1;
    for (size_t j = 0; j < y.size(); product *= y[j], ++j)
      if (product == before && y[j] == x[static_cast<size_t>(a)]) return set(op.outputs[0], static_cast<int>(j));
    return refuse(fmt::format("op '{}' (reshape) cuts or merges the sequence's axis", op.name));
  }
  if (op.type == "transpose") {
    const std::vector<int64_t> perm = op.attrs.get_ints("perm");
    for (size_t j = 0; j < perm.size(); ++j)
      if (perm[j] == a) return set(op.outputs[0], static_cast<int>(j));
    return refuse(fmt::format("op '{}' (transpose): no place for axis {}", op.name, a));
  }
  if (op.type == "embedding") {
    if (axis_of(op.inputs[1]) >= 0)
      return refuse(fmt::format("op '{}' reads its table '{}' reordered", op.name, op.inputs[1]));
    return set(op.outputs[0], a);
  }
  if (op.type == "attention") {
    const int seq = rank - 2;
    if (k != 0 || a != seq)
      return refuse(fmt::format("op '{}' (attention) holds the sequence on an axis other than its queries'", op.name));
    if (causal(op)) {
      expect(op, 1, seq);
      expect(op, 2, seq);
      if (axis_of(op.inputs[1]) != seq || axis_of(op.inputs[2]) != seq)
        refuse(fmt::format("op '{}' (causal attention) reads keys or values in the natural order", op.name));
    } else if (axis_of(op.inputs[1]) != axis_of(op.inputs[2])) {
      refuse(fmt::format("op '{}' (attention) reads its keys and values in two orders", op.name));
    }
    set(op.outputs[0], seq);
    if (op.outputs.size() > 1) set(op.outputs[1], seq);
    return;
  }
  if (op.type == "sparse_softmax_cross_entropy" || op.type == "accuracy") {
    const int la = axis_of(op.inputs[0]) >= 0 ? axis_of(op.inputs[0]) : axis_of(op.inputs[1]);
    if (la >= static_cast<int>(shape(op.inputs[0]).size()) - 1)
      return refuse(fmt::format("op '{}' takes its classes along the sequence", op.name));
    expect(op, 0, la);
    expect(op, 1, la);
    return set(op.outputs[0], static_cast<int>(shape(op.outputs[0]).size()) > la ? la : -1);
  }
  if (op.type == "reduce_mean" || op.type == "reduce_sum") {
    const std::vector<int64_t> axes = op.attrs.get_ints("axes");
    auto reduced = [&](int d) { return axes.empty() || std::count(axes.begin(), axes.end(), d) != 0 ||
                                       std::count(axes.begin(), axes.end(), d - rank) != 0; };
    if (reduced(a)) return;  // a sum over the places: any order
    if (op.attrs.get_int("keepdims", 0) != 0) return set(op.outputs[0], a);
    int out = a;
    for (int d = 0; d < a; ++d) out -= reduced(d) ? 1 : 0;
    return set(op.outputs[0], out);
  }
  refuse(fmt::format("op '{}' ({}) reads '{}' and is not known to work place by place", op.name, op.type,
                     op.inputs[static_cast<size_t>(k)]));
}

}  // namespace

SequenceOrder follow_sequence_order(const LogicalGraph& g, const std::map<std::string, int>& marked, int64_t length,
                                    const std::vector<std::string>& fetched) {
  Walk walk(g, length);
  for (const OpNode& op : g.ops)  // named first: the clearest reason
    if (!op.backward && op.type == "softmax" && causal(op))
      walk.refuse(fmt::format("op '{}' is a causal softmax (the composed attention), whose mask reads places in the "
                              "natural order",
                              op.name));
  if (!walk.out.refused.empty()) return walk.out;
  for (const auto& [tensor, axis] : marked)
    if (g.find(tensor) != nullptr) walk.set(tensor, axis);
  for (const OpNode& op : g.ops) {
    if (op.backward || op.def == nullptr || op.def->role != OpRole::kCompute) continue;
    walk.op(op);
    if (!walk.out.refused.empty()) return walk.out;
  }
  for (const std::string& t : fetched)
    if (walk.axis_of(t) >= 0) walk.refuse(fmt::format("the result fetches '{}', which would come back reordered", t));
  return walk.out;
}

}  // namespace rill::compiler
