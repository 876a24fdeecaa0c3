// The checks of where a job's parts run: groups (members placed together)
// and pipeline stages (groups in order, or num_stages for the compiler to
// cut). The graph sections are checked in job_check.cc.
#include <algorithm>
#include <map>
#include <set>

#include "graph/check_util.h"

namespace rill::graph::check {

// Pipeline stages are groups, each once; every input, variable and op is
// on a stage, and no op reads what a later stage makes (stages follow the
// forward pass). A pipeline needs micro-batches to stream. Or num_stages
// (the compiler cuts the ops itself), with no groups of its own to place.
void check_pipeline(const Job& job, Issues* issues) {
  if (!job.pipeline) return;
  const Pipeline& p = *job.pipeline;
  if (!p.stages.empty() && p.num_stages != 0) {
    issues->add("pipeline", "pipeline: give stages (groups) or num_stages (the compiler cuts), not both");
    return;
  }
  if (p.stages.empty() && p.num_stages < 0) {
    issues->add("pipeline.num_stages", "pipeline.num_stages must be > 0, got {}", p.num_stages);
    return;
  }
  if (p.stages.empty() && p.num_stages == 0) {
    issues->add("pipeline", "pipeline: no stages (name the groups in order, or set num_stages)");
    return;
  }
  if (p.balance != "params" && p.balance != "flops")
    issues->add("pipeline.balance", "pipeline.balance must be \"params\" or \"flops\", got \"{}\"", p.balance);
  const int64_t count = p.num_stages > 0 ? p.num_stages : static_cast<int64_t>(p.stages.size());
  if (count > 1 && job.train.micro_batches == 1)
    issues->add("train.micro_batches",
                 "pipeline: {} stages with train.micro_batches 1 take turns; set train.micro_batches (at least {}) "
                 "so micro-batches stream through them",
                 count, count);
  if (p.num_stages > 0) {
    for (size_t i = 0; i < job.ops.size(); ++i)
      if (job.ops[i].placement)
        issues->add(fmt::format("ops[{}].placement", i),
                     "{}: pipeline.num_stages places every op itself; remove the op's placement (or name the "
                     "stages as groups)",
                     label("ops", i, job.ops[i].name));
    if (!job.groups.empty())
      issues->add("groups",
                   "pipeline.num_stages places every op itself; remove the groups (or name them as the stages)");
    return;
  }
  std::map<std::string, size_t> stage_of;  // member -> stage index
  std::vector<std::string> group_names;
  for (const Group& g : job.groups) group_names.push_back(g.name);
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const std::string path = fmt::format("pipeline.stages[{}]", s);
    auto g = std::find_if(job.groups.begin(), job.groups.end(),
                          [&](const Group& group) { return group.name == p.stages[s]; });
    if (g == job.groups.end()) {
      issues->add(path, "{}: '{}' is not a group of the job{}", path, p.stages[s],
                   did_you_mean(p.stages[s], group_names));
      continue;
    }
    if (std::find(p.stages.begin(), p.stages.begin() + static_cast<std::ptrdiff_t>(s), p.stages[s]) !=
        p.stages.begin() + static_cast<std::ptrdiff_t>(s)) {
      issues->add(path, "{}: group '{}' is a stage twice", path, p.stages[s]);
      continue;
    }
    for (const std::string& m : g->members) stage_of.emplace(m, s);
  }
  auto on_no_stage = [&](const std::string& path, const std::string& where, const char* kind,
                         const std::string& name) {
    if (stage_of.count(name) == 0)
      issues->add(path, "{}: {} '{}' is on no stage (pipeline.stages: {})", where, kind, name,
                   fmt::join(p.stages, ", "));
  };
  for (size_t i = 0; i < job.inputs.size(); ++i)
    on_no_stage(fmt::format("inputs[{}]", i), label("inputs", i, job.inputs[i].name), "input", job.inputs[i].name);
  for (size_t i = 0; i < job.variables.size(); ++i)
    on_no_stage(fmt::format("variables[{}]", i), label("variables", i, job.variables[i].name), "variable",
                job.variables[i].name);
  std::map<std::string, std::string> maker;  // tensor -> the input, variable or op that makes it
  for (const Input& in : job.inputs) maker[in.name] = in.name;
  for (const Variable& v : job.variables) maker[v.name] = v.name;
  for (size_t i = 0; i < job.ops.size(); ++i) {
    const Op& op = job.ops[i];
    const std::string where = label("ops", i, op.name);
    on_no_stage(fmt::format("ops[{}]", i), where, "op", op.name);
    for (const std::string& out : op.outputs) maker[out] = op.name;
    auto mine = stage_of.find(op.name);
    if (mine == stage_of.end()) continue;
    for (const std::string& in : op.inputs) {
      auto m = maker.find(in);
      if (m == maker.end()) continue;
      auto theirs = stage_of.find(m->second);
      if (theirs != stage_of.end() && theirs->second > mine->second)
        issues->add(fmt::format("ops[{}].inputs", i),
                     "{}: on stage '{}' ({}), it reads '{}', made on the later stage '{}' ({}); stages must follow "
                     "the forward pass",
                     where, p.stages[mine->second], mine->second, in, p.stages[theirs->second], theirs->second);
    }
  }
}

// Group members are inputs, variables or ops of the job, each in at most
// one group and not also placed on its own; group names are distinct.
void check_groups(const Job& job, Issues* issues) {
  std::map<std::string, std::string> placed;  // member -> where it is placed
  std::map<std::string, std::string> kinds;   // name -> "input" | "variable" | "op"
  for (size_t i = 0; i < job.inputs.size(); ++i) {
    kinds[job.inputs[i].name] = "input";
    if (job.inputs[i].placement) placed[job.inputs[i].name] = label("inputs", i, job.inputs[i].name);
  }
  for (size_t i = 0; i < job.variables.size(); ++i) {
    kinds[job.variables[i].name] = "variable";
    if (job.variables[i].placement) placed[job.variables[i].name] = label("variables", i, job.variables[i].name);
  }
  for (size_t i = 0; i < job.ops.size(); ++i) {
    kinds[job.ops[i].name] = "op";
    if (job.ops[i].placement) placed[job.ops[i].name] = label("ops", i, job.ops[i].name);
  }
  std::vector<std::string> names;
  for (const auto& [name, kind] : kinds) names.push_back(name);
  std::set<std::string> group_names;
  for (size_t i = 0; i < job.groups.size(); ++i) {
    const Group& g = job.groups[i];
    const std::string path = fmt::format("groups[{}]", i), where = label("groups", i, g.name);
    if (g.name.empty()) issues->add(path + ".name", "{}: the group has no name", where);
    else if (!group_names.insert(g.name).second)
      issues->add(path + ".name", "{}: group name '{}' is used twice", where, g.name);
    if (g.members.empty()) issues->add(path + ".members", "{}: the group has no members", where);
    for (size_t k = 0; k < g.members.size(); ++k) {
      const std::string& m = g.members[k];
      const std::string mpath = fmt::format("{}.members[{}]", path, k);
      if (kinds.count(m) == 0) {
        issues->add(mpath, "{}: '{}' is not an input, variable or op of the job{}", where, m,
                     did_you_mean(m, names));
        continue;
      }
      auto [it, fresh] = placed.emplace(m, where);
      if (!fresh)
        issues->add(mpath, "{}: {} '{}' is already placed by {}", where, kinds[m], m, it->second);
    }
  }
}

}  // namespace rill::graph::check
