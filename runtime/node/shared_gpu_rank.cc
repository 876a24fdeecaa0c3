#include "runtime/node/shared_gpu_rank.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include <spdlog/spdlog.h>

#include "kernels/cuda/shared_gpu.h"

namespace rill {
namespace {

// What each rank tells the others of its exchange buffer.
struct Where {
  int64_t pid;
  uint64_t pointer;
  IpcHandle handle;
};
static_assert(sizeof(Where) == 80);

}  // namespace

SharedGpuRank::SharedGpuRank(int rank, int world, CudaContext* cuda, comm::Collectives* among)
    : rank_(rank), world_(world), cuda_(cuda), among_(among) {}

SharedGpuRank::~SharedGpuRank() {
  for (size_t r = 0; r < peers_.size(); ++r)
    if (mapped_[r]) shared_gpu_close(cuda_->device(), peers_[r]);
  shared_gpu_free(cuda_->device(), own_);
}

StatusOr<bool> SharedGpuRank::open(size_t bytes, uint64_t tag) {
  const char* about = "a device collective's exchange buffer";
  RILL_ASSIGN_OR_RETURN(SharedBuffer mine, shared_gpu_allocate(cuda_->device(), bytes));
  own_ = mine.data;
  capacity_ = bytes;
  Where where{static_cast<int64_t>(::getpid()), reinterpret_cast<uint64_t>(mine.data), mine.handle};
  std::vector<Where> all(static_cast<size_t>(world_));
  RILL_RETURN_IF_ERROR(
      among_->all_gather(std::as_bytes(std::span(&where, 1)), std::as_writable_bytes(std::span(all)), tag)
          .with_context(fmt::format("{} (rank {} of {})", about, rank_, world_)));
  // Another process's buffer by its handle, this one's by its pointer.
  peers_.assign(all.size(), nullptr);
  mapped_.assign(all.size(), false);
  bool ok = true;
  std::string why;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].pid == where.pid) {
      peers_[r] = reinterpret_cast<void*>(all[r].pointer);
      continue;
    }
    auto opened = shared_gpu_open(cuda_->device(), all[r].handle);
    if (!opened.ok()) {
      ok = false;
      why = opened.status().to_string();
      break;
    }
    peers_[r] = *opened;
    mapped_[r] = true;
  }
  // Every rank the same answer: each one's, gathered.
  const std::byte mine_ok = ok ? std::byte{1} : std::byte{0};
  std::vector<std::byte> oks(static_cast<size_t>(world_));
  RILL_RETURN_IF_ERROR(among_->all_gather(std::span(&mine_ok, 1), oks, tag)
                           .with_context(fmt::format("{} (rank {} of {})", about, rank_, world_)));
  if (!ok) spdlog::warn("rank {} of a device collective could not map another rank's buffer on cuda:{}: {}", rank_,
                        cuda_->device(), why);
  return std::all_of(oks.begin(), oks.end(), [](std::byte b) { return b == std::byte{1}; });
}

const char* SharedGpuRank::what(uint64_t tag) {
  auto [at, fresh] = whats_.try_emplace(tag);
  if (fresh) at->second = fmt::format("collective tag {} on cuda:{}, ranks sharing the GPU", tag, cuda_->device());
  return at->second.c_str();
}

Status SharedGpuRank::publish(std::span<const std::pair<const void*, size_t>> parts, uint64_t tag) {
  const char* about = what(tag);
  size_t at = 0;
  for (const auto& [source, bytes] : parts) at += bytes;
  if (at > capacity_)
    return internal_error("{}: {} bytes, but its exchange buffer holds {}", about, at, capacity_);
  at = 0;
  for (const auto& [source, bytes] : parts) {
    RILL_RETURN_IF_ERROR(cuda_->copy(static_cast<std::byte*>(own_) + at, source, bytes, CopyKind::kDeviceToDevice, about));
    at += bytes;
  }
  RILL_RETURN_IF_ERROR(cuda_->synchronize(about));
  return among_->barrier(tag).with_context(fmt::format("{}: waiting for the other ranks' inputs", about));
}

Status SharedGpuRank::finish(uint64_t tag) {
  const char* about = what(tag);
  RILL_RETURN_IF_ERROR(cuda_->synchronize(about));
  return among_->barrier(tag).with_context(fmt::format("{}: waiting for the other ranks to be done", about));
}

Status SharedGpuRank::all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                                 std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) {
  const size_t element = dtype_size(dtype);
  parts_.clear();
  for (size_t k = 0; k < inputs.size(); ++k) parts_.emplace_back(inputs[k], elements[k] * element);
  RILL_RETURN_IF_ERROR(publish(parts_, tag));
  // Tensor k of every rank's buffer, in rank order, into output k.
  size_t at = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    sources_.clear();
    for (int r = 0; r < world_; ++r) sources_.push_back(peer(r) + at);
    RILL_RETURN_IF_ERROR(
        shared_gpu_reduce(*cuda_, sources_, outputs[k], elements[k], dtype, static_cast<int>(op), what(tag)));
    at += elements[k] * element;
  }
  return finish(tag);
}

Status SharedGpuRank::reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                                     comm::ReduceOp op, uint64_t tag) {
  const size_t element = dtype_size(dtype);
  const size_t all = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank_, size_t{0});
  const std::pair<const void*, size_t> whole[] = {{input, all * element}};
  RILL_RETURN_IF_ERROR(publish(whole, tag));
  sources_.clear();
  for (int r = 0; r < world_; ++r) sources_.push_back(peer(r) + begin * element);
  RILL_RETURN_IF_ERROR(shared_gpu_reduce(*cuda_, sources_, output, counts[static_cast<size_t>(rank_)], dtype,
                                         static_cast<int>(op), what(tag)));
  return finish(tag);
}

Status SharedGpuRank::all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                                 uint64_t tag) {
  const size_t element = dtype_size(dtype);
  const std::pair<const void*, size_t> block[] = {{input, counts[static_cast<size_t>(rank_)] * element}};
  RILL_RETURN_IF_ERROR(publish(block, tag));
  size_t at = 0;
  for (int r = 0; r < world_; ++r) {
    const size_t bytes = counts[static_cast<size_t>(r)] * element;
    RILL_RETURN_IF_ERROR(
        cuda_->copy(static_cast<std::byte*>(output) + at, peer(r), bytes, CopyKind::kDeviceToDevice, what(tag)));
    at += bytes;
  }
  return finish(tag);
}

}  // namespace rill
