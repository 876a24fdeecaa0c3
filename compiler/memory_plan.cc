#include "compiler/memory_plan.h"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "base/actor_id.h"
#include "compiler/boxing_task.h"
#include "compiler/compiler.h"
#include "compiler/regst_lifetimes.h"
#include "compiler/slot_packing.h"
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

using Unit = std::pair<int64_t, int>;  // (regst, slot)

// One group's slots (a thread's, in one zone), largest first (then by
// regst and slot), each at the lowest offset clear of every slot placed
// before it that it may be live with (compiler/slot_packing.h). Sorts
// `units` so; returns their offsets from the group's start.
std::vector<int64_t> pack(const RegstLifetimes& lifetimes, uint64_t thread, std::vector<Unit>& units,
                          const MemoryPlan& out, int64_t* work) {
  std::vector<std::pair<int64_t, Unit>> sized;
  for (const Unit& u : units) sized.emplace_back(-out.regsts.at(u.first).slot_size, u);
  std::sort(sized.begin(), sized.end());
  std::vector<std::pair<int, int64_t>> order;  // (unit, bytes)
  for (size_t i = 0; i < sized.size(); ++i) {
    units[i] = sized[i].second;
    order.emplace_back(lifetimes.unit(lifetimes.index(units[i].first), units[i].second), -sized[i].first);
  }
  return pack_slots(lifetimes, thread, order, work);
}

}  // namespace

std::string MemoryZone::to_string() const {
  switch (kind) {
    case kHost: return "host";
    case kPinned: return "host (page-locked)";
    case kDevice: return fmt::format("cuda:{}", device);
  }
  return "?";
}

StatusOr<MemoryPlan> plan_memory(const plan::Plan& plan, int node, int64_t* work) {
  std::map<int, MemoryBlock> blocks;  // by zone rank
  auto block = [&](const MemoryZone& zone) -> MemoryBlock& {
    MemoryBlock& b = blocks[zone_rank(zone)];
    b.zone = zone;
    return b;
  };
  std::vector<int64_t> needed;
  struct State {
    uint64_t task;
    MemoryZone zone;
    int64_t tensor_bytes;
    int tensors;
  };
  std::vector<State> states;                              // variables' optimizer state, in task order
  std::vector<std::pair<uint64_t, int64_t>> boxing_scratch;  // (boxing task, bytes), in task order
  // Compute scratch by thread: the most any of its tasks needs, and the
  // tasks (a thread acts one at a time, so they take turns with it).
  std::map<uint64_t, std::pair<int64_t, std::vector<uint64_t>>> compute_scratch;
  for (const plan::Task* task : *plan.tasks()) {
    if (task->node() != node) continue;
    if (task->kind() == plan::TaskKind::Boxing) {
      RILL_ASSIGN_OR_RETURN(BoxingTask work, boxing_task(plan, *task));
      const auto bytes = static_cast<int64_t>(work.plan.scratch_bytes());
      if (bytes > kMaxBytes / 4) return invalid_argument("plan: node {}'s boxing scratch passes 2^62 bytes", node);
      if (bytes > 0) boxing_scratch.emplace_back(task->id(), bytes);
    }
    for (int64_t r : *task->inputs()) needed.push_back(r);
    for (int64_t r : *task->outputs()) needed.push_back(r);
    if (task->kind() == plan::TaskKind::Compute && task->scratch_bytes() > 0) {
      if (task->scratch_bytes() > kMaxBytes / 4)
        return invalid_argument("plan: node {}'s compute scratch passes 2^62 bytes", node);
      auto& [most, tasks] = compute_scratch[ActorId::thread_key(task->id())];
      most = std::max(most, task->scratch_bytes());
      tasks.push_back(task->id());
    }
    const plan::VariableConf* conf = task->variable();
    if (task->kind() == plan::TaskKind::Variable && conf != nullptr && conf->update_op() != nullptr &&
        task->outputs()->size() > 0) {
      const OpDef* update = find_op(conf->update_op()->str());
      const plan::RegstDesc* model = find_regst(plan, task->outputs()->Get(0));
      if (update != nullptr && model != nullptr) {
        const MemoryZone zone = ActorId::device_type(task->id()) == DeviceType::kCuda
                                    ? MemoryZone{MemoryZone::kDevice, static_cast<int>(ActorId::device(task->id()))}
                                    : MemoryZone{MemoryZone::kHost, -1};
        // A variable with lanes keeps its values in the body too, and with
        // DC-ASGD two more tensors of its size.
        const int lanes_extra = conf->lanes() > 1 ? 1 + (conf->dc_asgd_lambda() > 0 ? 2 : 0) : 0;
        const int64_t tensors = update->num_state + lanes_extra;
        if (model->bytes() < 0 || model->bytes() > kMaxBytes / 8 / std::max<int64_t>(1, tensors))
          return invalid_argument("plan: node {}'s optimizer state passes 2^62 bytes", node);
        if (update->num_state > 0) states.push_back({task->id(), zone, slot_size(model->bytes()), update->num_state});
        block(zone).held_bytes += lanes_extra * model->bytes();
      }
    }
  }
  std::sort(needed.begin(), needed.end());
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
  const RegstLifetimes lifetimes = plan.reuse_memory() ? RegstLifetimes::analyze(plan, node) : RegstLifetimes{};
  if (work != nullptr) *work += lifetimes.work();
  MemoryPlan out;
  std::map<int, int> index_of;  // zone rank -> position in out.blocks, set below
  std::vector<std::pair<int64_t, MemoryZone>> placed;
  // Slots that may share bytes, by (zone rank, thread): placed after the
  // zone's other slots, group by group.
  std::map<std::pair<int, uint64_t>, std::vector<Unit>> shared;
  for (int64_t id : needed) {
    const plan::RegstDesc* r = find_regst(plan, id);
    if (r == nullptr) return invalid_argument("plan: a task of node {} names regst {}, which the plan lacks", node, id);
    if (r->register_num() < 1)
      return invalid_argument("plan: regst '{}' has register_num {}", r->name() ? r->name()->str() : "", r->register_num());
    if (r->bytes() < 0 || r->bytes() > kMaxBytes / std::max(1, r->register_num()))
      return invalid_argument("plan: regst '{}' of {} bytes x {} slots", r->name() ? r->name()->str() : "", r->bytes(),
                              r->register_num());
    const MemoryZone zone = zone_of(*r, node);
    placed.emplace_back(id, zone);
    RegstMemory& m = out.regsts[id];
    m.slot_size = slot_size(r->bytes());
    m.slots = r->register_num();
    m.offsets.assign(static_cast<size_t>(m.slots), 0);
    if (lifetimes.shareable(id)) {
      block(zone);
      for (int slot = 0; slot < m.slots; ++slot) shared[{zone_rank(zone), lifetimes.thread_of(id)}].push_back({id, slot});
      continue;
    }
    MemoryBlock& b = block(zone);
    if (m.slot_size * m.slots > kMaxBytes - b.slot_bytes)
      return invalid_argument("plan: node {}'s slots in {} pass 2^62 bytes", node, zone.to_string());
    for (int slot = 0; slot < m.slots; ++slot) m.offsets[static_cast<size_t>(slot)] = b.slot_bytes + slot * m.slot_size;
    b.slot_bytes += m.slot_size * m.slots;
  }
  // Each group's slots packed from its zone's end.
  for (auto& [key, units] : shared) {
    MemoryBlock& b = blocks[key.first];
    const std::vector<int64_t> at = pack(lifetimes, key.second, units, out, work);
    int64_t extent = 0;
    for (size_t i = 0; i < units.size(); ++i) extent = std::max(extent, at[i] + out.regsts[units[i].first].slot_size);
    if (extent > kMaxBytes - b.slot_bytes)
      return invalid_argument("plan: node {}'s slots in {} pass 2^62 bytes", node, b.zone.to_string());
    for (size_t i = 0; i < units.size(); ++i)
      out.regsts[units[i].first].offsets[static_cast<size_t>(units[i].second)] = b.slot_bytes + at[i];
    b.slot_bytes += extent;
  }
  // Each variable's optimizer state after its zone's slots, tensor after tensor.
  for (const State& st : states) {
    MemoryBlock& b = block(st.zone);
    const int64_t bytes = st.tensor_bytes * st.tensors;
    if (bytes > kMaxBytes - b.slot_bytes - b.state_bytes)
      return invalid_argument("plan: node {}'s optimizer state in {} passes 2^62 bytes", node, st.zone.to_string());
    out.states[st.task] = {0, b.slot_bytes + b.state_bytes, st.tensor_bytes, st.tensors};
    b.state_bytes += bytes;
  }
  // Each boxing task's scratch after the host block's state.
  const MemoryZone host{MemoryZone::kHost, -1};
  for (const auto& [task, bytes] : boxing_scratch) {
    MemoryBlock& b = block(host);
    const int64_t size = slot_size(bytes);
    if (size > kMaxBytes - b.block_bytes())
      return invalid_argument("plan: node {}'s boxing scratch passes 2^62 bytes", node);
    out.boxing[task] = {0, b.block_bytes(), bytes};
    b.boxing_bytes += size;
  }
  // Then one region of compute scratch per thread (CPU kernels only).
  for (const auto& [thread, need] : compute_scratch) {
    MemoryBlock& b = block(host);
    const int64_t size = slot_size(need.first);
    if (size > kMaxBytes - b.block_bytes())
      return invalid_argument("plan: node {}'s compute scratch passes 2^62 bytes", node);
    for (uint64_t task : need.second) out.compute[task] = {0, b.block_bytes(), need.first};
    b.scratch_bytes += size;
  }
  for (auto& [rank, b] : blocks) {
    index_of[rank] = static_cast<int>(out.blocks.size());
    out.blocks.push_back(b);
  }
  for (auto& [task, scratch] : out.boxing) scratch.block = index_of[zone_rank(host)];
  for (auto& [task, scratch] : out.compute) scratch.block = index_of[zone_rank(host)];
  for (const auto& [id, zone] : placed) out.regsts[id].block = index_of[zone_rank(zone)];
  for (const State& st : states) out.states[st.task].block = index_of[zone_rank(st.zone)];
  return out;
}

namespace {

// What a body is given in a block: `bytes` at `offset` (bytes < 0: malformed).
struct BodyRegion {
  int block;
  int64_t offset, bytes;
  uint64_t task;
};

// Each region inside [from(b), to(b)) of its block b, none overlapping another.
Status check_regions(const MemoryPlan& memory, std::vector<BodyRegion> regions, const char* what, const char* where,
                     int64_t (*from)(const MemoryBlock&), int64_t (*to)(const MemoryBlock&)) {
  for (const BodyRegion& r : regions) {
    if (r.block < 0 || r.block >= static_cast<int>(memory.blocks.size()))
      return internal_error("memory plan: {} of task {} in block {} of {}", what, r.task, r.block,
                            memory.blocks.size());
    const MemoryBlock& b = memory.blocks[static_cast<size_t>(r.block)];
    if (r.bytes < 0 || r.offset < from(b) || r.offset + r.bytes > to(b))
      return internal_error("memory plan: {} of task {} at [{}, {}) outside its block's {} region [{}, {})", what,
                            r.task, r.offset, r.offset + r.bytes, where, from(b), to(b));
  }
  std::sort(regions.begin(), regions.end(), [](const BodyRegion& a, const BodyRegion& b) {
    return a.block != b.block ? a.block < b.block : a.offset < b.offset;
  });
  for (size_t i = 1; i < regions.size(); ++i)
    if (regions[i].block == regions[i - 1].block && regions[i].offset < regions[i - 1].offset + regions[i - 1].bytes)
      return internal_error("memory plan: the {} of tasks {} and {} overlap", what, regions[i - 1].task,
                            regions[i].task);
  return {};
}

// A regst slot's bytes in its block.
struct SlotSpan {
  int64_t begin, end, regst;
  int slot;
};

Status live_at_once(const SlotSpan& a, const SlotSpan& b) {
  return internal_error("memory plan: regsts {} (slot {}) and {} (slot {}) overlap ([{}, {}) and [{}, {})) but may be "
                        "live at once",
                        a.regst, a.slot, b.regst, b.slot, a.begin, a.end, b.begin, b.end);
}

// Two slots of different keys that overlap in a block (spans sorted by
// begin), if any: of those before each span, the one ending last and the
// one ending last among the other keys are all it may meet.
template <typename Key>
std::optional<std::pair<SlotSpan, SlotSpan>> overlap_across(const std::vector<SlotSpan>& spans, Key key) {
  const SlotSpan* last = nullptr;   // ends last
  const SlotSpan* other = nullptr;  // ends last of a key not last's
  for (const SlotSpan& s : spans) {
    const SlotSpan* met = last != nullptr && key(*last) != key(s) ? last : other;
    if (met != nullptr && met->end > s.begin) return std::pair{*met, s};
    if (last == nullptr || s.end > last->end) {
      if (last != nullptr && key(*last) != key(s)) other = last;
      last = &s;
    } else if (key(s) != key(*last) && (other == nullptr || s.end > other->end)) {
      other = &s;
    }
  }
  return std::nullopt;
}

// Slots may overlap only where the plan reuses memory and the lifetimes
// say they are never live at once: slots of two threads, or of a regst
// that may not share, never; two of one thread only when they may not be
// live at once (compiler/slot_packing.h).
Status check_overlaps(const plan::Plan& plan, int node, std::vector<std::vector<SlotSpan>>& by_block, int64_t* work) {
  bool any = false;
  for (auto& spans : by_block) {
    std::sort(spans.begin(), spans.end(), [](const SlotSpan& a, const SlotSpan& b) { return a.begin < b.begin; });
    auto alone = [](const SlotSpan& s) { return &s; };
    any = any || overlap_across(spans, alone).has_value();
  }
  if (!any) return {};
  if (!plan.reuse_memory())
    for (const auto& spans : by_block)
      if (auto met = overlap_across(spans, [](const SlotSpan& s) { return &s; })) return live_at_once(met->first, met->second);
  const RegstLifetimes lifetimes = RegstLifetimes::analyze(plan, node);
  if (work != nullptr) *work += lifetimes.work();
  // A shareable slot's key is its thread; any other slot is its own key.
  auto key = [&](const SlotSpan& s) {
    return lifetimes.shareable(s.regst) ? std::pair{lifetimes.thread_of(s.regst), static_cast<const SlotSpan*>(nullptr)}
                                        : std::pair{uint64_t{0}, &s};
  };
  for (const auto& spans : by_block) {
    if (auto met = overlap_across(spans, key)) return live_at_once(met->first, met->second);
    std::map<uint64_t, std::vector<PlacedSlot>> by_thread;
    for (const SlotSpan& s : spans)
      if (const int index = lifetimes.index(s.regst); index >= 0)
        by_thread[lifetimes.thread_of(s.regst)].push_back({lifetimes.unit(index, s.slot), s.begin, s.end});
    for (const auto& [thread, slots] : by_thread)
      if (auto met = overlap_live(lifetimes, thread, slots, work)) {
        auto span = [&](const PlacedSlot& p) {
          const auto [regst, slot] = lifetimes.slot_of(p.unit);
          return SlotSpan{p.begin, p.end, regst, slot};
        };
        return live_at_once(span(met->first), span(met->second));
      }
  }
  return {};
}

}  // namespace

Status check_memory_plan(const plan::Plan& plan, int node, const MemoryPlan& memory, int64_t* work) {
  auto name = [](const plan::RegstDesc* r) { return r->name() ? r->name()->str() : std::to_string(r->id()); };
  std::vector<std::vector<SlotSpan>> by_block(memory.blocks.size());
  for (const auto& [id, m] : memory.regsts) {
    if (m.block < 0 || m.block >= static_cast<int>(memory.blocks.size()))
      return internal_error("memory plan: regst {} in block {} of {}", id, m.block, memory.blocks.size());
    const plan::RegstDesc* r = find_regst(plan, id);
    if (r == nullptr) return internal_error("memory plan: regst {} is not in the plan", id);
    if (m.slot_size < r->bytes() || m.slots != r->register_num() || m.offsets.size() != static_cast<size_t>(m.slots))
      return internal_error("memory plan: regst '{}' has {} slots ({} placed) of {} bytes for {} of {} bytes", name(r),
                            m.slots, m.offsets.size(), m.slot_size, r->register_num(), r->bytes());
    for (int slot = 0; slot < m.slots; ++slot) {
      const int64_t begin = m.offsets[static_cast<size_t>(slot)], end = begin + m.slot_size;
      if (begin < 0 || end > memory.blocks[static_cast<size_t>(m.block)].slot_bytes)
        return internal_error("memory plan: regst '{}' slot {} at [{}, {}) outside its block of {} bytes", name(r),
                              slot, begin, end, memory.blocks[static_cast<size_t>(m.block)].slot_bytes);
      by_block[static_cast<size_t>(m.block)].push_back({begin, end, id, slot});
    }
  }
  // Every boxing and compute task that needs scratch has at least that
  // much, in the host block.
  auto has = [&](const std::unordered_map<uint64_t, ScratchMemory>& regions, const plan::Task& task, int64_t need,
                 const char* what) -> Status {
    auto at = regions.find(task.id());
    if (at == regions.end())
      return internal_error("memory plan: task '{}' needs {} bytes of {} and has none", task.name()->str(), need, what);
    const ScratchMemory& sc = at->second;
    if (sc.block < 0 || sc.block >= static_cast<int>(memory.blocks.size()) ||
        memory.blocks[static_cast<size_t>(sc.block)].zone.kind != MemoryZone::kHost || sc.bytes < need)
      return internal_error("memory plan: task '{}' has {} bytes of {} in block {}, it needs {} in host memory",
                            task.name()->str(), sc.bytes, what, sc.block, need);
    return {};
  };
  for (const plan::Task* task : *plan.tasks()) {
    if (task->node() != node) continue;
    if (task->kind() == plan::TaskKind::Boxing) {
      RILL_ASSIGN_OR_RETURN(BoxingTask work, boxing_task(plan, *task));
      const auto need = static_cast<int64_t>(work.plan.scratch_bytes());
      if (need > 0) RILL_RETURN_IF_ERROR(has(memory.boxing, *task, need, "boxing scratch"));
    } else if (task->kind() == plan::TaskKind::Compute && task->scratch_bytes() > 0) {
      RILL_RETURN_IF_ERROR(has(memory.compute, *task, task->scratch_bytes(), "compute scratch"));
    }
  }
  // Optimizer state, then boxing scratch: each inside its region of its
  // block, apart from the others.
  std::vector<BodyRegion> states, scratch;
  for (const auto& [task, st] : memory.states)
    states.push_back({st.block, st.offset, st.tensors < 1 || st.tensor_bytes < 0 ? -1 : st.tensor_bytes * st.tensors, task});
  for (const auto& [task, sc] : memory.boxing) scratch.push_back({sc.block, sc.offset, sc.bytes, task});
  RILL_RETURN_IF_ERROR(check_regions(memory, std::move(states), "optimizer state", "state",
                                     [](const MemoryBlock& b) { return b.slot_bytes; },
                                     [](const MemoryBlock& b) { return b.slot_bytes + b.state_bytes; }));
  RILL_RETURN_IF_ERROR(check_regions(memory, std::move(scratch), "boxing scratch", "boxing",
                                     [](const MemoryBlock& b) { return b.slot_bytes + b.state_bytes; },
                                     [](const MemoryBlock& b) { return b.block_bytes() - b.scratch_bytes; }));
  // Compute scratch: one region per thread, which only its tasks share.
  std::map<uint64_t, BodyRegion> by_thread;
  for (const auto& [task, sc] : memory.compute) {
    if (sc.bytes < 0) return internal_error("memory plan: compute scratch of task {} of {} bytes", task, sc.bytes);
    auto [r, added] = by_thread.try_emplace(ActorId::thread_key(task), BodyRegion{sc.block, sc.offset, sc.bytes, task});
    if (r->second.block != sc.block || r->second.offset != sc.offset)
      return internal_error("memory plan: tasks {} and {} of one thread have compute scratch at two places",
                            r->second.task, task);
    r->second.bytes = std::max(r->second.bytes, sc.bytes);
  }
  std::vector<BodyRegion> compute;
  for (const auto& [thread, r] : by_thread) compute.push_back(r);
  RILL_RETURN_IF_ERROR(check_regions(memory, std::move(compute), "compute scratch", "compute scratch",
                                     [](const MemoryBlock& b) { return b.block_bytes() - b.scratch_bytes; },
                                     [](const MemoryBlock& b) { return b.block_bytes(); }));
  return check_overlaps(plan, node, by_block, work);
}

}  // namespace rill::compiler
