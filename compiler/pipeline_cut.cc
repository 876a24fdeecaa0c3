#include "compiler/pipeline_cut.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "compiler/logical_graph.h"
#include "compiler/validate.h"

namespace rill::compiler {
namespace {

// Stage i's devices: part i of `stages` equal parts of the cluster.
StatusOr<std::vector<graph::Placement>> stage_placements(const Cluster& c, int stages) {
  auto range = [](int first, int count) {
    std::vector<int> v(static_cast<size_t>(count));
    std::iota(v.begin(), v.end(), first);
    return v;
  };
  std::vector<graph::Placement> out;
  for (int s = 0; s < stages; ++s) {
    graph::Placement p;
    p.type = c.device_type;
    if (c.num_nodes % stages == 0) {
      const int per = c.num_nodes / stages;
      p.nodes = range(s * per, per);
      p.devices = range(0, c.devices_per_node);
    } else if (c.num_nodes == 1 && c.devices_per_node % stages == 0) {
      const int per = c.devices_per_node / stages;
      p.nodes = {0};
      p.devices = range(s * per, per);
    } else {
      return invalid_argument(
          "pipeline.num_stages {} divides neither the {} nodes nor, on one node, its {} devices: each stage needs "
          "an equal part of the cluster",
          stages, c.num_nodes, c.devices_per_node);
    }
    out.push_back(std::move(p));
  }
  return out;
}

// The cost of each op of the job, in job order (0 for an op the logical
// graph pruned).
StatusOr<std::vector<int64_t>> op_costs(const graph::Job& job, const Cluster& cluster, const std::string& balance) {
  graph::Job plain = job;
  plain.pipeline.reset();
  RILL_ASSIGN_OR_RETURN(LogicalGraph g, build_logical_graph(plain, cluster, Mode::kTrain));
  std::map<std::string, const OpNode*> by_name;
  for (const OpNode& op : g.ops) by_name[op.name] = &op;
  std::map<std::string, int64_t> variable_bytes;
  for (const VariableNode& v : g.variables)
    variable_bytes[v.variable.name] =
        num_elements(v.variable.shape) * static_cast<int64_t>(dtype_size(v.variable.dtype));
  std::vector<int64_t> costs;
  for (const graph::Op& op : job.ops) {
    int64_t cost = 0;
    auto it = by_name.find(op.name);
    if (it != by_name.end() && balance == "params") {
      for (const std::string& in : op.inputs) {
        auto v = variable_bytes.find(in);
        if (v == variable_bytes.end()) continue;
        cost += v->second;
        variable_bytes.erase(v);  // counted once, at its first reader
      }
    } else if (it != by_name.end()) {
      const OpNode& node = *it->second;
      for (const std::string& out : node.outputs) cost += num_elements(g.find(out)->meta.shape);
      if (node.type == "matmul") {
        const Shape& a = g.find(node.inputs[0])->meta.shape;
        cost *= 2 * a[node.attrs.get_int("transpose_a", 0) != 0 ? 0 : 1];
      }
    }
    costs.push_back(cost);
  }
  return costs;
}

// Where a stage may begin: before an op that starts a layer, one that reads
// a variable while none of its inputs is made by an op that does (fc2 after
// relu starts one; the bias_add after a matmul, or a loss, does not).
std::vector<bool> layer_starts(const graph::Job& job) {
  std::set<std::string> variables, weighted;  // weighted: outputs of ops reading a variable
  for (const graph::Variable& v : job.variables) variables.insert(v.name);
  std::vector<bool> starts;
  for (const graph::Op& op : job.ops) {
    bool reads_variable = false, after_weighted = false;
    for (const std::string& in : op.inputs) {
      reads_variable = reads_variable || variables.count(in) > 0;
      after_weighted = after_weighted || weighted.count(in) > 0;
    }
    starts.push_back(reads_variable && !after_weighted);
    if (reads_variable)
      for (const std::string& out : op.outputs) weighted.insert(out);
  }
  return starts;
}


}  // namespace

std::vector<int> balanced_runs(const std::vector<int64_t>& costs, std::vector<bool> may_start, int parts) {
  const size_t n = costs.size();
  if (std::count(may_start.begin() + 1, may_start.end(), true) < parts - 1) may_start.assign(n, true);
  std::vector<size_t> first;  // each block's first element
  std::vector<int64_t> block;  // each block's cost
  for (size_t i = 0; i < n; ++i) {
    if (i == 0 || may_start[i]) {
      first.push_back(i);
      block.push_back(0);
    }
    block.back() += costs[i];
  }
  // The runs greedy packing needs with no run above `limit` (>= every block).
  auto pack = [&](int64_t limit, std::vector<int>* run_of_block) {
    int run = 0;
    int64_t sum = 0;
    for (size_t k = 0; k < block.size(); ++k) {
      if (sum + block[k] > limit && k > 0) {
        ++run;
        sum = 0;
      }
      sum += block[k];
      if (run_of_block) (*run_of_block)[k] = run;
    }
    return run + 1;
  };
  int64_t lo = *std::max_element(block.begin(), block.end());
  int64_t hi = std::accumulate(block.begin(), block.end(), int64_t{0});
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (pack(mid, nullptr) <= parts) hi = mid;
    else lo = mid + 1;
  }
  std::vector<int> run_of_block(block.size(), 0);
  int runs = pack(lo, &run_of_block);
  // Too few runs: split the last run of two or more blocks before its last
  // block, until there are enough (there are at least `parts` blocks).
  while (runs < parts) {
    size_t k = block.size() - 1;
    while (run_of_block[k] != run_of_block[k - 1]) --k;
    for (size_t j = k; j < block.size(); ++j) ++run_of_block[j];
    ++runs;
  }
  std::vector<int> run_of(n, 0);
  for (size_t k = 0; k < block.size(); ++k)
    for (size_t i = first[k]; i < (k + 1 < first.size() ? first[k + 1] : n); ++i) run_of[i] = run_of_block[k];
  return run_of;
}

StatusOr<graph::Job> cut_stages(const graph::Job& job, const Cluster& cluster) {
  if (!job.pipeline || job.pipeline->num_stages <= 0) return job;
  const int stages = static_cast<int>(job.pipeline->num_stages);
  if (static_cast<int64_t>(job.ops.size()) < stages)
    return invalid_argument("pipeline.num_stages {} is more than the job's {} ops", stages, job.ops.size());
  RILL_ASSIGN_OR_RETURN(std::vector<graph::Placement> placements, stage_placements(cluster, stages));
  RILL_ASSIGN_OR_RETURN(std::vector<int64_t> costs, op_costs(job, cluster, job.pipeline->balance));
  const std::vector<int> stage_of_op = balanced_runs(costs, layer_starts(job), stages);
  graph::Job out = job;
  out.groups.clear();
  for (int s = 0; s < stages; ++s)
    out.groups.push_back({fmt::format("stage{}", s), placements[static_cast<size_t>(s)], {}});
  std::map<std::string, int> first_reader;  // input or variable -> stage
  for (size_t i = 0; i < job.ops.size(); ++i) {
    out.groups[static_cast<size_t>(stage_of_op[i])].members.push_back(job.ops[i].name);
    for (const std::string& in : job.ops[i].inputs) first_reader.emplace(in, stage_of_op[i]);
  }
  auto join = [&](const std::string& name) {
    auto it = first_reader.find(name);
    out.groups[static_cast<size_t>(it == first_reader.end() ? 0 : it->second)].members.push_back(name);
  };
  for (const graph::Input& in : job.inputs) join(in.name);
  for (const graph::Variable& v : job.variables) join(v.name);
  out.pipeline->stages.clear();
  for (const graph::Group& g : out.groups) out.pipeline->stages.push_back(g.name);
  out.pipeline->num_stages = 0;
  return out;
}

Status check_stage_devices(const graph::Job& job, const LogicalGraph& g) {
  if (!job.pipeline || job.pipeline->stages.size() < 2) return {};
  // A member's placement (index into g.placements), by name.
  std::map<std::string, int> placed;
  for (const InputNode& in : g.inputs) placed[in.input.name] = in.placement;
  for (const VariableNode& v : g.variables) placed[v.variable.name] = v.placement;
  for (const OpNode& op : g.ops) placed[op.name] = op.placement;
  std::map<int, std::string> stage_on;  // placement -> the first stage group on it
  for (const std::string& stage : job.pipeline->stages) {
    auto group = std::find_if(job.groups.begin(), job.groups.end(), [&](const graph::Group& x) { return x.name == stage; });
    if (group == job.groups.end()) continue;  // the job check names it
    for (const std::string& member : group->members) {
      auto it = placed.find(member);
      if (it == placed.end()) continue;
      auto [first, fresh] = stage_on.emplace(it->second, stage);
      if (!fresh && first->second != stage)
        return invalid_argument("pipeline.stages: '{}' and '{}' are placed on the same devices ({}): each stage "
                                "needs devices of its own",
                                first->second, stage, g.placement(it->second).to_string());
      break;  // a group's members share its placement
    }
  }
  return {};
}

}  // namespace rill::compiler
