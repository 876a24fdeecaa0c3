#include "compiler/transfers.h"

#include <map>
#include <utility>

namespace rill::compiler {
namespace {

int add_io_task(TaskGraph* g, TaskInfo kind, std::string name, int node, int input) {
  TaskNode task;
  task.info = kind;
  task.acts_per_step = g->regsts[static_cast<size_t>(input)].readies_per_step;
  task.name = std::move(name);
  task.node = node;
  task.placement = -1;
  task.inputs = {input};
  return g->add_task(std::move(task), DeviceType::kIo, 0);
}

// A copy of regst `of` (same piece, name and SBP) written by `task`.
int add_copy_regst(TaskGraph* g, int of, int task) {
  RegstNode r;
  r.name = g->regsts[of].name;
  r.meta = g->regsts[of].meta;
  r.logical_shape = g->regsts[of].logical_shape;
  r.sbp = g->regsts[of].sbp;
  r.readies_per_step = g->regsts[of].readies_per_step;
  r.stage = g->regsts[of].stage;
  r.after_updates = g->regsts[of].after_updates;  // made once a step after the updates too: one slot
  return g->add_regst(std::move(r), task);
}

// Adds the Send/Recv pair carrying `regst` to node `to`; returns the regst
// Recv writes there.
int add_pair(TaskGraph* g, int regst, int to) {
  const int from = g->regsts[regst].node;
  const std::string what = fmt::format("{}#{}@node{}->node{}", g->regsts[regst].name, g->regsts[regst].id, from, to);
  int send = add_io_task(g, SendInfo{}, "send:" + what, from, regst);
  int wire = add_copy_regst(g, regst, send);
  int recv = add_io_task(g, RecvInfo{}, "recv:" + what, to, wire);
  return add_copy_regst(g, regst, recv);
}

}  // namespace

Status insert_transfers(TaskGraph* g) {
  std::map<std::pair<int, int>, int> received;  // (regst, node) -> the regst Recv writes there
  const size_t num_tasks = g->tasks.size();     // the tasks added here never read across nodes
  for (size_t t = 0; t < num_tasks; ++t) {
    for (size_t k = 0; k < g->tasks[t].inputs.size(); ++k) {
      const int regst = g->tasks[t].inputs[k];
      if (regst < 0 || regst >= static_cast<int>(g->regsts.size()))
        return internal_error("task '{}' reads regst {} of {}", g->tasks[t].name, regst, g->regsts.size());
      const int to = g->tasks[t].node;
      if (g->regsts[regst].node == to) continue;
      // Host memory on both ends: the task reads the regst where it is made
      // (its node keeps a mirror of the slots, filled by the `ready` that
      // carries the bytes, and the ack goes back to the producer).
      const auto on_gpu = [](uint64_t id) { return ActorId::device_type(id) == DeviceType::kCuda; };
      if (!on_gpu(g->regsts[regst].producer_id) && !on_gpu(g->tasks[t].id)) continue;
      auto [it, fresh] = received.try_emplace({regst, to}, -1);
      if (fresh) it->second = add_pair(g, regst, to);
      g->tasks[t].inputs[k] = it->second;
    }
  }
  return {};
}

namespace {

// A task's memory zone: -1 for host memory, else the cuda device index.
int zone_of(const TaskNode& task) {
  return ActorId::device_type(task.id) == DeviceType::kCuda ? static_cast<int>(ActorId::device(task.id)) : -1;
}

}  // namespace

namespace {

// The regst holding `regst`'s bytes in memory zone `zone`, made by a Copy
// task on first use: on the device's thread, the reader's (`reader`) for
// host to device and from another GPU of the node (peer to peer), the
// producer's for device to host.
int copy_to(TaskGraph* g, std::map<std::pair<int, int>, int>* copied, int regst, int zone, int reader) {
  const int producer = g->regsts[regst].producer;
  // Another node's regst (not stored in a node's graph): read across nodes
  // only from host memory by a host task (insert_transfers), as it is.
  if (producer < 0) return regst;
  // A Copy's output lives where it copied to; any other regst where its producer runs.
  const int from =
      g->tasks[producer].is<CopyInfo>() ? g->regsts[regst].device : zone_of(g->tasks[producer]);
  if (from == zone) return regst;
  auto [it, fresh] = copied->try_emplace({regst, zone}, -1);
  if (!fresh) return it->second;
  const TaskNode& device_task = g->tasks[zone >= 0 ? reader : producer];
  TaskNode task;
  task.info = CopyInfo{};
  task.name = fmt::format("{}:{}#{}", zone < 0 ? "d2h" : from < 0 ? "h2d" : "d2d", g->regsts[regst].name,
                          g->regsts[regst].id);
  task.node = device_task.node;
  task.placement = device_task.placement;
  task.device = static_cast<int>(ActorId::device(device_task.id));
  task.inputs = {regst};
  task.acts_per_step = g->regsts[static_cast<size_t>(regst)].readies_per_step;
  const int index = g->add_task(std::move(task), DeviceType::kCuda, ActorId::device(device_task.id));
  const int out = add_copy_regst(g, regst, index);
  g->regsts[out].device = zone;
  (*copied)[{regst, zone}] = out;
  return out;
}

}  // namespace

Status insert_copies(TaskGraph* g) {
  std::map<std::pair<int, int>, int> copied;  // (regst, zone) -> the regst holding it there
  const size_t num_tasks = g->tasks.size();
  for (size_t t = 0; t < num_tasks; ++t) {
    if (!g->stores(g->tasks[t].node)) continue;  // another node's, stored to read across nodes
    const int zone = zone_of(g->tasks[t]);
    for (size_t k = 0; k < g->tasks[t].inputs.size(); ++k)
      g->tasks[t].inputs[k] = copy_to(g, &copied, g->tasks[t].inputs[k], zone, static_cast<int>(t));
  }
  // Every other regst lives where its producer runs.
  for (RegstNode& r : g->regsts)
    if (r.producer >= 0 && !g->tasks[r.producer].is<CopyInfo>())
      r.device = zone_of(g->tasks[r.producer]);
  return {};
}

}  // namespace rill::compiler
