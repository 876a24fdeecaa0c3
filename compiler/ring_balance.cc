// The zigzag order of a job's sequence where it balances its rings: see
// ring_balance.h.
#include "compiler/ring_balance.h"

#include <algorithm>

#include <fmt/format.h>

namespace rill::compiler {
namespace {

bool causal(const Attrs& attrs) { return attrs.get_int("causal", 0) != 0; }

// A tensor the job marks: its name, its sequence axis, and what to call it.
struct Marked {
  std::string name;
  int64_t axis;
  std::string where;
};

std::vector<Marked> marked(const graph::Job& job) {
  std::vector<Marked> out;
  for (const graph::Input& in : job.inputs)
    if (in.sequence_axis) out.push_back({in.name, *in.sequence_axis, fmt::format("input '{}'", in.name)});
  for (const graph::Variable& v : job.variables)
    if (v.sequence_axis) out.push_back({v.name, *v.sequence_axis, fmt::format("variable '{}'", v.name)});
  return out;
}

}  // namespace

StatusOr<int> zigzag_parts(const graph::Job& job, const LogicalGraph& g) {
  const std::vector<Marked> tensors = marked(job);
  if (tensors.empty()) return 1;
  int parts = 0;
  int64_t length = 0;
  for (const OpNode& op : g.ops) {
    if (op.type == "softmax" && causal(op.attrs)) return 1;  // the composed form: places in the natural order
    if (op.type != "attention" || !causal(op.attrs) || !op.ring) continue;
    const graph::Placement& p = g.placement(op.placement);
    if (p.type != DeviceType::kCpu) return 1;
    const Shape& q = g.find(op.inputs[0])->meta.shape;
    const size_t axis = q.size() - 2;
    const int64_t piece = piece_region(q, op.input_sbp[0], p.num_nodes(), p.per_node(), 0).extent[axis];
    if (piece == 0 || q[axis] % piece != 0) return 1;
    const int ring = static_cast<int>(q[axis] / piece);
    if (parts != 0 && (ring != parts || q[axis] != length)) return 1;  // rings of another size or sequence
    parts = ring;
    length = q[axis];
  }
  if (parts < 2 || length % (2 * parts) != 0) return 1;
  for (const Marked& m : tensors) {
    const LogicalTensor* t = g.find(m.name);
    if (t == nullptr) continue;  // not read by this plan (an eval plan's own inputs)
    const Shape& shape = t->meta.shape;
    if (m.axis < 0 || m.axis >= static_cast<int64_t>(shape.size()) || shape[static_cast<size_t>(m.axis)] != length)
      return invalid_argument(
          "{}: its sequence_axis {} of {} is not the sequence of {} places its causal attentions split over {} "
          "devices (ring attention, balanced in the zigzag order)",
          m.where, m.axis, shape_string(shape), length, parts);
  }
  return parts;
}

StatusOr<graph::Job> in_zigzag_order(const graph::Job& given, int parts) {
  graph::Job job = given;
  for (graph::Op& op : job.ops)
    if (op.type == "attention" && causal(op.attrs)) op.attrs.set("zigzag", int64_t{parts});
  for (const Marked& m : marked(given)) {
    const std::string ordered = m.name + ".zigzag";
    for (const graph::Op& op : job.ops)
      if (op.name == ordered || std::find(op.outputs.begin(), op.outputs.end(), ordered) != op.outputs.end())
        return invalid_argument("{}: the compiler names its zigzag order '{}', which op '{}' already names", m.where,
                                ordered, op.name);
    for (graph::Op& op : job.ops)
      std::replace(op.inputs.begin(), op.inputs.end(), m.name, ordered);
    graph::Op zigzag;
    zigzag.name = ordered;
    zigzag.type = "zigzag";
    zigzag.inputs = {m.name};
    zigzag.outputs = {ordered};
    zigzag.attrs.set("axis", m.axis);
    zigzag.attrs.set("parts", int64_t{parts});
    for (const graph::Input& in : given.inputs)
      if (in.name == m.name) zigzag.placement = in.placement;
    for (const graph::Variable& v : given.variables)
      if (v.name == m.name) zigzag.placement = v.placement;
    for (graph::Group& group : job.groups)
      if (std::find(group.members.begin(), group.members.end(), m.name) != group.members.end())
        group.members.push_back(ordered);
    job.ops.insert(job.ops.begin(), std::move(zigzag));
  }
  return job;
}

}  // namespace rill::compiler
