#include "compiler/memory_plan.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/actor_id.h"
#include "compiler/compiler.h"
#include "kernels/op.h"

namespace rill::compiler {
namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 62;

bool on_cuda(uint64_t task, int node) {
  return ActorId::device_type(task) == DeviceType::kCuda && static_cast<int>(ActorId::node(task)) == node;
}

// Where a regst read or written by `node` lives there.
MemoryZone zone_of(const plan::RegstDesc& r, int node) {
  if (r.device() >= 0) return {MemoryZone::kDevice, r.device()};
  bool touched_by_gpu = on_cuda(r.producer(), node);
  if (r.consumers() != nullptr)
    for (uint64_t c : *r.consumers()) touched_by_gpu = touched_by_gpu || on_cuda(c, node);
  return {touched_by_gpu ? MemoryZone::kPinned : MemoryZone::kHost, -1};
}

// Orders zones: host, page-locked host, then GPUs by index.
int zone_rank(const MemoryZone& z) { return z.kind == MemoryZone::kDevice ? 2 + z.device : z.kind; }

}  // namespace

std::string MemoryZone::to_string() const {
  switch (kind) {
    case kHost: return "host";
    case kPinned: return "host (page-locked)";
    case kDevice: return fmt::format("cuda:{}", device);
  }
  return "?";
}

StatusOr<MemoryPlan> plan_memory(const plan::Plan& plan, int node) {
  std::map<int, MemoryBlock> blocks;  // by zone rank
  auto block = [&](const MemoryZone& zone) -> MemoryBlock& {
    MemoryBlock& b = blocks[zone_rank(zone)];
    b.zone = zone;
    return b;
  };
  std::vector<int64_t> needed;
  for (const plan::Task* task : *plan.tasks()) {
    if (task->node() != node) continue;
    for (int64_t r : *task->inputs()) needed.push_back(r);
    for (int64_t r : *task->outputs()) needed.push_back(r);
    if (task->kind() == plan::TaskKind::Compute && task->scratch_bytes() > 0) {
      if (task->scratch_bytes() > kMaxBytes - block({MemoryZone::kHost, -1}).scratch_bytes)
        return invalid_argument("plan: node {}'s compute scratch passes 2^62 bytes", node);
      block({MemoryZone::kHost, -1}).scratch_bytes += task->scratch_bytes();
    }
    const plan::VariableConf* conf = task->variable();
    if (task->kind() == plan::TaskKind::Variable && conf != nullptr && conf->update_op() != nullptr &&
        task->outputs()->size() > 0) {
      const OpDef* update = find_op(conf->update_op()->str());
      const plan::RegstDesc* model = find_regst(plan, task->outputs()->Get(0));
      if (update != nullptr && model != nullptr) {
        // A variable with lanes keeps its values in the body too, and with
        // DC-ASGD two more tensors of its size.
        const int lanes_extra = conf->lanes() > 1 ? 1 + (conf->dc_asgd_lambda() > 0 ? 2 : 0) : 0;
        const MemoryZone zone = ActorId::device_type(task->id()) == DeviceType::kCuda
                                    ? MemoryZone{MemoryZone::kDevice, static_cast<int>(ActorId::device(task->id()))}
                                    : MemoryZone{MemoryZone::kHost, -1};
        const int64_t tensors = update->num_state + lanes_extra;
        if (model->bytes() < 0 || model->bytes() > (kMaxBytes - block(zone).state_bytes) / std::max<int64_t>(1, tensors))
          return invalid_argument("plan: node {}'s optimizer state passes 2^62 bytes", node);
        block(zone).state_bytes += tensors * model->bytes();
      }
    }
  }
  std::sort(needed.begin(), needed.end());
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
  MemoryPlan out;
  std::map<int, int> index_of;  // zone rank -> position in out.blocks, set below
  std::vector<std::pair<int64_t, MemoryZone>> placed;
  for (int64_t id : needed) {
    const plan::RegstDesc* r = find_regst(plan, id);
    if (r == nullptr) return invalid_argument("plan: a task of node {} names regst {}, which the plan lacks", node, id);
    if (r->register_num() < 1)
      return invalid_argument("plan: regst '{}' has register_num {}", r->name() ? r->name()->str() : "", r->register_num());
    if (r->bytes() < 0 || r->bytes() > kMaxBytes / std::max(1, r->register_num()))
      return invalid_argument("plan: regst '{}' of {} bytes x {} slots", r->name() ? r->name()->str() : "", r->bytes(),
                              r->register_num());
    const MemoryZone zone = zone_of(*r, node);
    MemoryBlock& b = block(zone);
    RegstMemory m;
    m.offset = b.slot_bytes;
    m.slot_size = slot_size(r->bytes());
    m.slots = r->register_num();
    if (m.slot_size * m.slots > kMaxBytes - b.slot_bytes)
      return invalid_argument("plan: node {}'s slots in {} pass 2^62 bytes", node, zone.to_string());
    b.slot_bytes += m.slot_size * m.slots;
    out.regsts[id] = m;
    placed.emplace_back(id, zone);
  }
  for (auto& [rank, b] : blocks) {
    index_of[rank] = static_cast<int>(out.blocks.size());
    out.blocks.push_back(b);
  }
  for (const auto& [id, zone] : placed) out.regsts[id].block = index_of[zone_rank(zone)];
  return out;
}

Status check_memory_plan(const plan::Plan& plan, const MemoryPlan& memory) {
  auto name = [](const plan::RegstDesc* r) { return r->name() ? r->name()->str() : std::to_string(r->id()); };
  struct Span {
    int64_t begin, end, regst;
  };
  std::vector<std::vector<Span>> by_block(memory.blocks.size());
  for (const auto& [id, m] : memory.regsts) {
    if (m.block < 0 || m.block >= static_cast<int>(memory.blocks.size()))
      return internal_error("memory plan: regst {} in block {} of {}", id, m.block, memory.blocks.size());
    const plan::RegstDesc* r = find_regst(plan, id);
    if (r == nullptr) return internal_error("memory plan: regst {} is not in the plan", id);
    if (m.slot_size < r->bytes() || m.slots != r->register_num())
      return internal_error("memory plan: regst '{}' has {} slots of {} bytes for {} of {} bytes", name(r),
                            m.slots, m.slot_size, r->register_num(), r->bytes());
    const int64_t end = m.offset + m.slot_size * m.slots;
    if (m.offset < 0 || end > memory.blocks[static_cast<size_t>(m.block)].slot_bytes)
      return internal_error("memory plan: regst '{}' at [{}, {}) outside its block of {} bytes", name(r),
                            m.offset, end, memory.blocks[static_cast<size_t>(m.block)].slot_bytes);
    by_block[static_cast<size_t>(m.block)].push_back({m.offset, end, id});
  }
  for (auto& spans : by_block) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].begin < spans[i - 1].end)
        return internal_error("memory plan: regsts {} and {} overlap ([{}, {}) and [{}, {}))", spans[i - 1].regst,
                              spans[i].regst, spans[i - 1].begin, spans[i - 1].end, spans[i].begin, spans[i].end);
  }
  return {};
}

}  // namespace rill::compiler
