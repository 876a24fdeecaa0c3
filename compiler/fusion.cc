#include "compiler/fusion.h"

#include <algorithm>
#include <map>
#include <set>

namespace rill::compiler {
namespace {

const std::string& output_of(const graph::Op& op) { return op.outputs.empty() ? op.name : op.outputs[0]; }

// Tensors read other than by ops: the loss, metrics, fetches, the generator's.
std::set<std::string> read_outside_ops(const graph::Job& job) {
  std::set<std::string> out(job.fetch.begin(), job.fetch.end());
  out.insert(job.loss);
  for (const graph::Metric& m : job.metrics) out.insert(m.tensor);
  if (job.generate) {
    out.insert(job.generate->input);
    out.insert(job.generate->logits);
  }
  return out;
}

bool same_groups(const graph::Job& job, const std::string& a, const std::string& b) {
  for (const graph::Group& g : job.groups) {
    const bool has_a = std::find(g.members.begin(), g.members.end(), a) != g.members.end();
    const bool has_b = std::find(g.members.begin(), g.members.end(), b) != g.members.end();
    if (has_a != has_b) return false;
  }
  return true;
}

}  // namespace

graph::Job fuse_ops(graph::Job job) {
  std::map<std::string, const graph::Variable*> variables;
  for (const graph::Variable& v : job.variables) variables[v.name] = &v;
  std::map<std::string, int> readers;  // tensor -> ops reading it (each input counted)
  for (const graph::Op& op : job.ops)
    for (const std::string& in : op.inputs) ++readers[in];
  const std::set<std::string> outside = read_outside_ops(job);
  std::map<std::string, size_t> made_by;  // tensor -> the op making it
  for (size_t i = 0; i < job.ops.size(); ++i)
    for (const std::string& out : job.ops[i].outputs) made_by[out] = i;

  std::set<size_t> fused_away;  // bias_add ops folded into their gelu_tanh
  for (graph::Op& gelu : job.ops) {
    if (gelu.type != "gelu_tanh" || gelu.inputs.size() != 1) continue;
    auto maker = made_by.find(gelu.inputs[0]);
    if (maker == made_by.end()) continue;
    const graph::Op& bias = job.ops[maker->second];
    const std::string& sum = output_of(bias);
    const auto b = bias.inputs.size() == 2 ? variables.find(bias.inputs[1]) : variables.end();
    const bool hinted = std::any_of(bias.output_sbp.begin(), bias.output_sbp.end(), [](const auto& h) { return h; });
    if (bias.type != "bias_add" || bias.outputs.size() > 1 || bias.attrs.has("axis") || b == variables.end() ||
        b->second->shape.size() != 1 || readers[sum] != 1 || outside.count(sum) != 0 || hinted ||
        bias.placement != gelu.placement || bias.recompute != gelu.recompute || !same_groups(job, bias.name, gelu.name))
      continue;
    gelu.type = "bias_gelu_tanh";
    gelu.inputs = bias.inputs;
    fused_away.insert(maker->second);
    for (graph::Group& g : job.groups) std::erase(g.members, bias.name);
  }
  if (fused_away.empty()) return job;
  std::vector<graph::Op> ops;
  for (size_t i = 0; i < job.ops.size(); ++i)
    if (fused_away.count(i) == 0) ops.push_back(std::move(job.ops[i]));
  job.ops = std::move(ops);
  return job;
}

}  // namespace rill::compiler
