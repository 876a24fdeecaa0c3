#include "runtime/node/shared_gpu_rank.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include <spdlog/spdlog.h>

#include "kernels/cuda/shared_gpu.h"

namespace rill {
namespace {

// This process, told apart from others on the machine (pids repeat across
// PID namespaces): drawn once.
uint64_t process_nonce() {
  static const uint64_t nonce = [] {
    std::random_device random;
    return (static_cast<uint64_t>(random()) << 32) ^ random();
  }();
  return nonce;
}

// What each rank tells the others of its exchange buffer (pointer 0: it
// has none).
struct Where {
  uint64_t process;
  uint64_t pointer;
  IpcHandle handle;
};
static_assert(sizeof(Where) == 80);

}  // namespace

SharedGpuRank::SharedGpuRank(int rank, int world, CudaContext* cuda, comm::Collectives* among)
    : rank_(rank), world_(world), device_(cuda->device()), cuda_(cuda), among_(among) {}

SharedGpuRank::~SharedGpuRank() {
  // An exchange buffer close() did not free (a run that failed) stays:
  // another rank may map it, or (in this process) read it still.
  unmap();
}

void SharedGpuRank::unmap() {
  for (size_t r = 0; r < peers_.size(); ++r)
    if (mapped_[r]) {
      shared_gpu_close(device_, peers_[r]);
      mapped_[r] = false;
    }
}

StatusOr<bool> SharedGpuRank::open(size_t bytes, uint64_t tag) {
  const std::string about = fmt::format("a device collective's exchange buffer (rank {} of {})", rank_, world_);
  if (among_->rank() != rank_ || among_->world() != world_)
    return internal_error("{}: rank {} of {} among its nodes", about, among_->rank(), among_->world());
  // A rank that cannot make its buffer still takes part: every rank learns
  // it, and all give up alike.
  Where where{process_nonce(), 0, {}};
  if (auto mine = shared_gpu_allocate(device_, bytes); mine.ok()) {
    own_ = mine->data;
    capacity_ = bytes;
    where.pointer = reinterpret_cast<uint64_t>(mine->data);
    where.handle = mine->handle;
  } else {
    spdlog::warn("{}: {}", about, mine.status().to_string());
  }
  std::vector<Where> all(static_cast<size_t>(world_));
  RILL_RETURN_IF_ERROR(
      among_->all_gather(std::as_bytes(std::span(&where, 1)), std::as_writable_bytes(std::span(all)), tag)
          .with_context(about));
  // Another process's buffer by its handle, this one's by its pointer.
  peers_.assign(all.size(), nullptr);
  mapped_.assign(all.size(), false);
  bool ok = true;
  for (size_t r = 0; ok && r < all.size(); ++r) {
    if (all[r].pointer == 0) {
      ok = false;
    } else if (all[r].process == where.process) {
      peers_[r] = reinterpret_cast<void*>(all[r].pointer);
    } else if (auto opened = shared_gpu_open(device_, all[r].handle); opened.ok()) {
      peers_[r] = *opened;
      mapped_[r] = true;
    } else {
      spdlog::warn("{}: mapping rank {}'s: {}", about, r, opened.status().to_string());
      ok = false;
    }
  }
  // Every rank the same answer: each one's, gathered.
  const std::byte mine_ok = ok ? std::byte{1} : std::byte{0};
  std::vector<std::byte> oks(static_cast<size_t>(world_));
  RILL_RETURN_IF_ERROR(among_->all_gather(std::span(&mine_ok, 1), oks, tag).with_context(about));
  if (std::all_of(oks.begin(), oks.end(), [](std::byte b) { return b == std::byte{1}; })) return true;
  // Given up: each unmaps the others', then frees its own once all have.
  RILL_RETURN_IF_ERROR(close(tag));
  return false;
}

Status SharedGpuRank::close(uint64_t tag) {
  unmap();
  RILL_RETURN_IF_ERROR(among_->barrier(tag).with_context(
      fmt::format("a device collective's exchange buffer (rank {} of {}): waiting for the others to let go of it",
                  rank_, world_)));
  shared_gpu_free(device_, own_);
  own_ = nullptr;
  capacity_ = 0;
  return {};
}

const char* SharedGpuRank::what(uint64_t tag) {
  auto [at, fresh] = whats_.try_emplace(tag);
  if (fresh) at->second = fmt::format("collective tag {} on cuda:{}, ranks sharing the GPU", tag, device_);
  return at->second.c_str();
}

Status SharedGpuRank::publish(std::span<const std::pair<const void*, size_t>> parts, comm::ReduceOp op,
                              uint64_t tag, std::span<const size_t> counts) {
  const char* about = what(tag);
  size_t at = 0;
  for (const auto& [source, bytes] : parts) at += bytes;
  // Refused before meeting the others (who refuse alike): no rank waits.
  if (at > capacity_) return internal_error("{}: {} bytes, but its exchange buffer holds {}", about, at, capacity_);
  if (static_cast<int>(op) > 3) return internal_error("{}: reduce op {} (0 to 3 here)", about, static_cast<int>(op));
  at = 0;
  for (const auto& [source, bytes] : parts) {
    RILL_RETURN_IF_ERROR(
        cuda_->copy(static_cast<std::byte*>(own_) + at, source, bytes, CopyKind::kDeviceToDevice, about));
    at += bytes;
  }
  // Met even when the copies failed, so the others are not left waiting.
  const Status copied = cuda_->synchronize(about);
  Status met;
  if (counts.empty()) {
    met = among_->barrier(tag);
  } else {
    const size_t n = counts.size();
    counts_.resize(n * static_cast<size_t>(world_));
    std::copy(counts.begin(), counts.end(), counts_.begin() + static_cast<long>(n * static_cast<size_t>(rank_)));
    const std::span<std::byte> all = std::as_writable_bytes(std::span<uint64_t>(counts_));
    met = among_->all_gather(all.subspan(n * static_cast<size_t>(rank_) * sizeof(uint64_t), n * sizeof(uint64_t)),
                             all, tag);
  }
  if (!copied.ok()) return copied;
  // Named only when it failed: an act formats nothing.
  return met.ok() ? met : met.with_context(fmt::format("{}: waiting for the other ranks' inputs", about));
}

Status SharedGpuRank::finish(const Status& work, uint64_t tag) {
  const char* about = what(tag);
  const Status synced = work.ok() ? cuda_->synchronize(about) : work;
  const Status met = among_->barrier(tag);
  if (!synced.ok()) return synced;
  return met.ok() ? met : met.with_context(fmt::format("{}: waiting for the other ranks to be done", about));
}

Status SharedGpuRank::all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                                 std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) {
  const size_t element = dtype_size(dtype);
  parts_.clear();
  for (size_t k = 0; k < inputs.size(); ++k) parts_.emplace_back(inputs[k], elements[k] * element);
  RILL_RETURN_IF_ERROR(publish(parts_, op, tag));
  // Tensor k of every rank's buffer, in rank order, into output k.
  Status work;
  size_t at = 0;
  for (size_t k = 0; work.ok() && k < inputs.size(); ++k) {
    sources_.clear();
    for (int r = 0; r < world_; ++r) sources_.push_back(peer(r) + at);
    work = shared_gpu_reduce(*cuda_, sources_, outputs[k], elements[k], dtype, static_cast<int>(op), what(tag));
    at += elements[k] * element;
  }
  return finish(work, tag);
}

Status SharedGpuRank::reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                                     comm::ReduceOp op, uint64_t tag) {
  const size_t element = dtype_size(dtype);
  const size_t all = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank_, size_t{0});
  const std::pair<const void*, size_t> whole[] = {{input, all * element}};
  RILL_RETURN_IF_ERROR(publish(whole, op, tag));
  sources_.clear();
  for (int r = 0; r < world_; ++r) sources_.push_back(peer(r) + begin * element);
  return finish(shared_gpu_reduce(*cuda_, sources_, output, counts[static_cast<size_t>(rank_)], dtype,
                                  static_cast<int>(op), what(tag)),
                tag);
}

Status SharedGpuRank::all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                                 uint64_t tag) {
  const size_t element = dtype_size(dtype);
  const std::pair<const void*, size_t> block[] = {{input, counts[static_cast<size_t>(rank_)] * element}};
  RILL_RETURN_IF_ERROR(publish(block, comm::ReduceOp::kSum, tag));
  Status work;
  size_t at = 0;
  for (int r = 0; work.ok() && r < world_; ++r) {
    const size_t bytes = counts[static_cast<size_t>(r)] * element;
    work = cuda_->copy(static_cast<std::byte*>(output) + at, peer(r), bytes, CopyKind::kDeviceToDevice, what(tag));
    at += bytes;
  }
  return finish(work, tag);
}

Status SharedGpuRank::all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                                 std::span<const size_t> recv_counts, DType dtype, uint64_t tag) {
  const size_t element = dtype_size(dtype), world = static_cast<size_t>(world_), me = static_cast<size_t>(rank_);
  const size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
  const std::pair<const void*, size_t> blocks[] = {{input, sent * element}};
  RILL_RETURN_IF_ERROR(publish(blocks, comm::ReduceOp::kSum, tag, send_counts));
  // Rank r's block for this one: after r's blocks for lower ranks.
  Status work;
  size_t at = 0;
  for (size_t r = 0; work.ok() && r < world; ++r) {
    const uint64_t* theirs = counts_.data() + r * world;
    if (theirs[me] != recv_counts[r]) {
      work = internal_error("{}: rank {} sends {} elements, rank {} expects {}", what(tag), r, theirs[me], me,
                            recv_counts[r]);
      break;
    }
    const size_t from = std::accumulate(theirs, theirs + me, uint64_t{0}) * element;
    work = cuda_->copy(static_cast<std::byte*>(output) + at, peer(static_cast<int>(r)) + from, recv_counts[r] * element,
                       CopyKind::kDeviceToDevice, what(tag));
    at += recv_counts[r] * element;
  }
  return finish(work, tag);
}

}  // namespace rill
