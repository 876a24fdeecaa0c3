// The zigzag order of a job's sequence where it balances its rings: see
// ring_balance.h.
#include "compiler/ring_balance.h"

#include <algorithm>

#include <fmt/format.h>

#include "compiler/sequence_order.h"

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

RingBalance causal_rings(const LogicalGraph& g) {
  int parts = 0;
  int64_t length = 0;
  for (const OpNode& op : g.ops) {
    if (op.type != "attention" || !causal(op.attrs) || !op.ring) continue;
    const graph::Placement& p = g.placement(op.placement);
    if (p.type != DeviceType::kCpu)
      return RingBalance{1, "the rings run on GPUs, whose attention kernels take the sequence in its natural order "
                            "only"};
    const Shape& q = g.find(op.inputs[0])->meta.shape;
    const size_t axis = q.size() - 2;
    const int64_t piece = piece_region(q, op.input_sbp[0], p.num_nodes(), p.per_node(), 0).extent[axis];
    if (piece == 0 || q[axis] % piece != 0) return RingBalance{1, "a ring's pieces differ in length"};
    const int ring = static_cast<int>(q[axis] / piece);
    if (parts != 0 && (ring != parts || q[axis] != length))
      return RingBalance{1, fmt::format("rings of {} and {} places over {} and {} devices", length, q[axis], parts,
                                        ring)};
    parts = ring;
    length = q[axis];
  }
  if (parts < 2) return RingBalance{};
  if (length % (2 * parts) != 0)
    return RingBalance{1, fmt::format("the sequence's {} places are not {} chunks of one length", length, 2 * parts)};
  return RingBalance{parts, "", length};
}

StatusOr<RingBalance> ring_balance(const graph::Job& job, const LogicalGraph& g) {
  const RingBalance rings = causal_rings(g);
  if (rings.parts < 2) return rings;
  const int parts = rings.parts;
  const int64_t length = rings.length;
  const std::vector<Marked> tensors = marked(job);
  if (tensors.empty()) return RingBalance{1, "the job marks no tensor's sequence_axis"};
  std::map<std::string, int> axes;
  for (const Marked& m : tensors) {
    const LogicalTensor* t = g.find(m.name);
    if (t == nullptr) continue;  // not read by this plan (an eval plan's own inputs)
    const Shape& shape = t->meta.shape;
    if (m.axis < 0 || m.axis >= static_cast<int64_t>(shape.size()) || shape[static_cast<size_t>(m.axis)] != length)
      return invalid_argument(
          "{}: its sequence_axis {} of {} is not the sequence of {} places its causal attentions split over {} "
          "devices (ring attention, balanced in the zigzag order)",
          m.where, m.axis, shape_string(shape), length, parts);
    axes[m.name] = static_cast<int>(m.axis);
  }
  const SequenceOrder order = follow_sequence_order(g, axes, length, job.fetch);
  if (!order.refused.empty()) return RingBalance{1, order.refused};
  return RingBalance{parts, "", length};
}

StatusOr<graph::Job> in_zigzag_order(const graph::Job& given, int parts) {
  graph::Job job = given;
  for (graph::Op& op : job.ops)
    if (op.type == "attention" && causal(op.attrs)) op.attrs.set("zigzag", int64_t{parts});
  for (const Marked& m : marked(given)) {
    const std::string ordered = m.name + ".zigzag";
    auto taken = [&](const std::string& name) {
      for (const graph::Op& op : job.ops)
        if (op.name == name || std::find(op.outputs.begin(), op.outputs.end(), name) != op.outputs.end()) return true;
      for (const graph::Input& in : job.inputs)
        if (in.name == name) return true;
      for (const graph::Variable& v : job.variables)
        if (v.name == name) return true;
      return false;
    };
    if (taken(ordered))
      return invalid_argument("{}: the compiler names its zigzag order '{}', which the job already names", m.where,
                              ordered);
    // Before its first reader (a pipeline's cut follows the ops' order).
    size_t first = job.ops.size();
    for (size_t i = 0; i < job.ops.size(); ++i) {
      graph::Op& op = job.ops[i];
      if (std::find(op.inputs.begin(), op.inputs.end(), m.name) == op.inputs.end()) continue;
      std::replace(op.inputs.begin(), op.inputs.end(), m.name, ordered);
      first = std::min(first, i);
    }
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
    job.ops.insert(job.ops.begin() + static_cast<std::ptrdiff_t>(first), std::move(zigzag));
  }
  return job;
}

}  // namespace rill::compiler
