// Regst slots: every regst this node's tasks write or read, in host memory,
// page-locked host memory (a GPU copies from or into it) or a GPU's memory,
// and after them the variables' optimizer state, the boxings' scratch and
// the threads' compute scratch; the GPUs' contexts.
#include "runtime/node/node_run.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "compiler/memory_plan.h"
#include "runtime/node/plan_reader.h"

namespace rill {

const plan::RegstDesc* NodeRun::regst(int64_t id) const {
  auto it = regst_by_id_.find(id);
  return it == regst_by_id_.end() ? nullptr : it->second;
}

namespace {

// MemAvailable of /proc/meminfo in bytes, or -1 where it cannot be read.
int64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

std::string gb(int64_t bytes) { return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9); }

}  // namespace

// A plan whose memory does not fit is refused before anything is allocated,
// naming the memory, what the plan needs there and what would shrink it.
Status NodeRun::check_fits(const compiler::MemoryPlan& memory) {
  const std::string shrink =
      "what would shrink it: more devices or nodes to split tensors over (an SBP split, train.zero for the "
      "variables and their optimizer state), pipeline stages on other nodes (pipeline.num_stages), or "
      "train.micro_batches (activations of a micro-batch at a time)";
  int64_t host = 0, slots = 0, state = 0, boxing = 0, scratch = 0;
  for (const compiler::MemoryBlock& b : memory.blocks) {
    if (b.zone.kind == compiler::MemoryZone::kDevice) {
      RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(b.zone.device)));
      size_t free = 0, total = 0;
      RILL_RETURN_IF_ERROR(cuda->memory_info(&free, &total, "planning memory"));
      if (b.total() > static_cast<int64_t>(free))
        return Status(Code::kFailedPrecondition,
                      fmt::format("node {}: the plan does not fit {}: it needs {} (regst slots {}, optimizer state "
                                  "{}), and {} of its {} are free; {}",
                                  options_.node, b.zone.to_string(), gb(b.total()), gb(b.slot_bytes),
                                  gb(b.state_bytes + b.held_bytes), gb(static_cast<int64_t>(free)), gb(static_cast<int64_t>(total)),
                                  shrink));
      continue;
    }
    host += b.total();
    slots += b.slot_bytes;
    state += b.state_bytes + b.held_bytes;  // a laned variable's values with its state
    boxing += b.boxing_bytes;
    scratch += b.scratch_bytes;
  }
  const int64_t available = host_memory_available();
  if (available >= 0 && host > available)
    return Status(Code::kFailedPrecondition,
                  fmt::format("node {}: the plan does not fit host memory: it needs {} (regst slots {}, optimizer "
                              "state {}, boxing buffers {}, compute scratch {}), and {} are available; {}",
                              options_.node, gb(host), gb(slots), gb(state), gb(boxing), gb(scratch), gb(available),
                              shrink));
  return {};
}

// Slots for every regst this node's tasks write, and mirror slots for those
// they read from another node (a `ready` from there carries the bytes): one
// block per memory zone (compiler/memory_plan.h), each allocated once.
Status NodeRun::allocate_regsts() {
  for (const plan::RegstDesc* desc : *plan_->regsts()) regst_by_id_[desc->id()] = desc;
  RILL_ASSIGN_OR_RETURN(compiler::MemoryPlan memory, compiler::plan_memory(*plan_, options_.node));
  RILL_RETURN_IF_ERROR(compiler::check_memory_plan(*plan_, options_.node, memory));
  RILL_RETURN_IF_ERROR(check_fits(memory));
  // Page-locked memory is made through a context of one of the node's GPUs.
  int first_gpu = -1;
  for (const plan::Task* task : *plan_->tasks())
    if (task->node() == options_.node && ActorId::device_type(task->id()) == DeviceType::kCuda)
      first_gpu = first_gpu < 0 ? static_cast<int>(ActorId::device(task->id()))
                                : std::min(first_gpu, static_cast<int>(ActorId::device(task->id())));
  std::vector<std::byte*> base(memory.blocks.size(), nullptr);
  for (size_t i = 0; i < memory.blocks.size(); ++i) {
    const compiler::MemoryBlock& block = memory.blocks[i];
    const size_t bytes = static_cast<size_t>(compiler::slot_size(block.block_bytes()));
    const std::string what = fmt::format("node {}'s regsts in {}", options_.node, block.zone.to_string());
    void* p = nullptr;
    switch (block.zone.kind) {
      case compiler::MemoryZone::kDevice: {
        RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(block.zone.device)));
        RILL_ASSIGN_OR_RETURN(p, cuda->allocate(bytes, what.c_str()));
        device_memory_.emplace_back(p, DeviceFree{cuda});
        break;
      }
      case compiler::MemoryZone::kPinned: {
        if (first_gpu < 0) return internal_error("{}: page-locked slots on a node without GPU tasks", what);
        RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(first_gpu)));
        RILL_ASSIGN_OR_RETURN(p, cuda->allocate_host(bytes, what.c_str()));
        pinned_memory_.emplace_back(p, HostFree{cuda});
        break;
      }
      case compiler::MemoryZone::kHost: {
        p = std::aligned_alloc(64, bytes);
        if (!p) return Status(Code::kUnavailable, fmt::format("{}: out of memory for {} bytes", what, bytes));
        std::memset(p, 0, bytes);
        memory_.emplace_back(p);
        break;
      }
    }
    base[i] = static_cast<std::byte*>(p);
  }
  for (const auto& [task, sc] : memory.boxing)
    boxing_memory_[task] = base[static_cast<size_t>(sc.block)] + sc.offset;
  for (const auto& [task, sc] : memory.compute)
    compute_memory_[task] = {base[static_cast<size_t>(sc.block)] + sc.offset, static_cast<size_t>(sc.bytes)};
  for (const auto& [task, st] : memory.states)
    for (int i = 0; i < st.tensors; ++i)
      state_memory_[task].push_back(base[static_cast<size_t>(st.block)] + st.offset + i * st.tensor_bytes);
  for (const auto& [id, m] : memory.regsts) {
    const plan::RegstDesc* desc = regst(id);
    TensorMeta meta{read_shape(desc->shape()), read_dtype(desc->dtype())};
    auto& views = slots_[id];
    for (int s = 0; s < m.slots; ++s)
      views.push_back(TensorView{base[static_cast<size_t>(m.block)] + m.offsets[static_cast<size_t>(s)], meta.shape, meta.dtype});
  }
  return {};
}

StatusOr<CudaContext*> NodeRun::cuda_for(uint32_t device) {
  auto& ctx = cuda_[device];
  if (!ctx) {
    auto made = CudaContext::create(static_cast<int>(device), plan_->allow_tf32());
    if (!made.ok()) return made.status().with_context(fmt::format("node {}", options_.node));
    ctx = std::move(*made);
  }
  return ctx.get();
}

}  // namespace rill
