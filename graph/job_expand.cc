#include "graph/job_expand.h"

#include <map>

#include <fmt/format.h>

namespace rill::graph {
namespace {

// The expansion an op takes, if any.
StatusOr<std::vector<Op>> (*expansion_of(const Op& op))(const Op&) {
  if (op.type == "linear") return expand_linear;
  // `composed` means something only with `heads`: without, the expansion
  // refuses it rather than the fused op running in its place unsaid.
  if (op.type == "attention" && (op.attrs.has("heads") || op.attrs.has("composed"))) return expand_attention_heads;
  return nullptr;
}

}  // namespace

void expand_short_ops(Job* job, check::Issues* issues, Origins* origins) {
  bool any = false;
  for (const Op& op : job->ops) any = any || expansion_of(op) != nullptr;
  if (!any) return;
  // Each op's origin as written, before the ops move.
  auto origin_of = [&](size_t k) {
    const std::string key = fmt::format("ops[{}]", k);
    auto it = origins->find(key);
    return it == origins->end() ? Origin{key, ""} : it->second;
  };
  std::vector<Op> ops;
  std::vector<Origin> from;
  std::map<std::string, std::vector<std::string>> made;  // an op written short -> the ops it became
  for (size_t k = 0; k < job->ops.size(); ++k) {
    Op& op = job->ops[k];
    const Origin origin = origin_of(k);
    auto expand = expansion_of(op);
    if (expand == nullptr) {
      ops.push_back(std::move(op));
      from.push_back(origin);
      continue;
    }
    StatusOr<std::vector<Op>> expanded = expand(op);
    if (!expanded.ok()) {  // at the entry written (a block's op: its layer too)
      issues->add(origin.path, "{} ({}): {}{}", origin.path, op.name, expanded.status().message(),
                  origin.layer.empty() ? "" : fmt::format(" (in {})", origin.layer));
      continue;
    }
    std::vector<std::string>& names = made[op.name];
    for (Op& e : *expanded) {
      names.push_back(e.name);
      ops.push_back(std::move(e));
      from.push_back(origin);
    }
  }
  job->ops = std::move(ops);
  // A group that names an op written short holds every op it became.
  for (Group& group : job->groups) {
    std::vector<std::string> members;
    for (const std::string& m : group.members) {
      auto it = made.find(m);
      if (it == made.end()) members.push_back(m);
      else members.insert(members.end(), it->second.begin(), it->second.end());
    }
    group.members = std::move(members);
  }
  for (auto it = origins->begin(); it != origins->end();)
    it = it->first.rfind("ops[", 0) == 0 ? origins->erase(it) : std::next(it);
  for (size_t k = 0; k < from.size(); ++k) {
    const std::string expanded = fmt::format("ops[{}]", k);
    if (from[k].path != expanded) (*origins)[expanded] = from[k];
  }
}

}  // namespace rill::graph
