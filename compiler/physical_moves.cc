// Moves between placements: each target piece from the nearest replicas
// of the source pieces it overlaps, sliced where they live.
#include <tuple>

#include "compiler/expander.h"

namespace rill::compiler {

int Expander::add_copy_task(const BoxingNode& box, std::string name, int placement, int node, int device,
                  const std::vector<std::pair<int, Region>>& sources, const Region& target, const NdSbp& sbp,
                  Rpc rpc) {
  const bool cpu = at(placement).type == DeviceType::kCpu;
  const Thread thread = cpu ? thread_of(at(placement), node, device, rpc) : Thread{DeviceType::kComm, kCommThreads};
  // Moves read across nodes: stored on every node.
  const Numbering::Task t = add_task(node, thread, true, [&] {
    TaskNode task;
    BoxingInfo& boxing = task.info.emplace<BoxingInfo>();
    task.name = std::move(name);
    task.placement = placement;
    boxing.in = box.in;
    boxing.out = box.out;
    for (const auto& [regst, region] : sources) {
      task.inputs.push_back(regst);
      boxing.origins.insert(boxing.origins.end(), region.origin.begin(), region.origin.end());
    }
    boxing.origins.insert(boxing.origins.end(), target.origin.begin(), target.origin.end());
    task.acts_per_step = rate(box.tensor);
    if (cpu) task.device = device;
    return task;
  });
  return static_cast<int>(num_.regst(t, sbp, false, [&] { return region_regst(box.tensor, boxed_meta(g_, box), sbp, target); }));
}

void Expander::add_move(int b) {
  const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
  const graph::Placement& from = at(box.placement);
  const graph::Placement& to = at(box.to);
  const Shape& shape = g_.find(box.tensor)->meta.shape;
  std::vector<Region> held(static_cast<size_t>(from.parallel()));
  for (int i = 0; i < from.parallel(); ++i) held[static_cast<size_t>(i)] = piece(shape, box.in, from, i);
  const std::string name = fmt::format("move:{}:{}->{}", box.tensor, box.in.to_string(), box.out.to_string());
  std::map<std::tuple<int, Shape, Shape>, int> slices;  // (source rank, overlap) -> its regst
  const bool partial = box.in.has(Sbp::kPartialSum);
  // On a pserver: the trainers' gradients come in (sends), a lookup's ids
  // come in and its rows go out (prefetches).
  const LogicalTensor* moved = g_.find(box.tensor);
  const bool gradient = partial || (moved->origin == TensorOrigin::kOp &&
                                    g_.ops[static_cast<size_t>(moved->producer)].backward);
  const Rpc rpc = gradient ? Rpc::kSend : Rpc::kPrefetch;
  // An async pserver's block: each trainer rank reads its own lane's model;
  // the variable reads each rank's gradient itself (no sum).
  if (auto lanes = model_lanes_.find(box.tensor);
      lanes != model_lanes_.end() && from.parallel() == 1 && static_cast<int>(lanes->second.size()) == to.parallel()) {
    for (int j = 0; j < to.parallel(); ++j)
      boxed_[static_cast<size_t>(b)].push_back(
          handle(lanes->second[static_cast<size_t>(j)], box.tensor, box.in, box.placement, 0));
    return;
  }
  if (partial && to.parallel() == 1 && lane_gradient(box.tensor)) {
    std::vector<int>& inputs = lane_inputs_[b];
    for (int i = 0; i < from.parallel(); ++i)
      inputs.push_back(handle(boxing_input(box, i), box.tensor, box.in, box.placement, i));
    boxed_[static_cast<size_t>(b)].push_back(inputs[0]);
    return;
  }
  for (int j = 0; j < to.parallel(); ++j) {
    const Region target = piece(shape, box.out, to, j);
    const int node = to.node_of(j), device = to.device_of(j);
    // Distinct source regions overlapping the target -> the nearest replica
    // (partial sums: every rank's).
    std::map<std::tuple<std::vector<int64_t>, std::vector<int64_t>, int>, std::pair<int, int>>
        nearest;  // -> (score, rank)
    for (int i = 0; i < from.parallel(); ++i) {
      const Region& r = held[static_cast<size_t>(i)];
      if (intersect(r, target).size() == 0 && !(target.size() == 0 && i == 0)) continue;
      const int score = (from.node_of(i) == node ? 0 : 2 * from.parallel()) +
                        (from.node_of(i) == node && from.device_of(i) == device ? 0 : from.parallel()) +
                        (i - node % from.parallel() + from.parallel()) % from.parallel();
      auto [it, fresh] = nearest.try_emplace({r.origin, r.extent, partial ? i : -1}, score, i);
      if (!fresh && score < it->second.first) it->second = {score, i};
    }
    std::vector<std::pair<int, Region>> parts;
    for (const auto& [region, pick] : nearest) {
      const int i = pick.second;
      const Region& r = held[static_cast<size_t>(i)];
      const Region overlap = intersect(r, target);
      const int input = handle(boxing_input(box, i), box.tensor, box.in, box.placement, i);
      if (r == target || from.node_of(i) == node || overlap == r) {
        parts.push_back({input, r});
        continue;
      }
      // Target pieces alike (B on a node's devices) share one slice.
      auto [it, fresh] = slices.try_emplace({i, overlap.origin, overlap.extent}, -1);
      if (fresh)
        it->second = add_copy_task(box, fmt::format("{}@slice{}to{}", name, i, j), box.placement, from.node_of(i),
                                   from.device_of(i), {{input, r}}, overlap, box.out, rpc);
      parts.push_back({it->second, overlap});
    }
    if (parts.size() == 1 && parts[0].second == target) {
      boxed_[static_cast<size_t>(b)].push_back(parts[0].first);
      continue;
    }
    boxed_[static_cast<size_t>(b)].push_back(
        add_copy_task(box, fmt::format("{}@{}", name, j), box.to, node, device, parts, target, box.out, rpc));
  }
}

}  // namespace rill::compiler
