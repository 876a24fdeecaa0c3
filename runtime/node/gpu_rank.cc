#include "runtime/node/gpu_rank.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace rill {

const char* GpuRank::what(uint64_t tag) {
  auto [at, fresh] = whats_.try_emplace(tag);
  if (fresh)
    at->second = fmt::format("collective tag {} on cuda:{}{}", tag, cuda_->device(),
                             host_ != nullptr ? " through host memory" : "");
  return at->second.c_str();
}

StatusOr<void*> GpuRank::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    // The stream may still read the old one: wait before letting it go.
    if (scratch_ != nullptr) {
      RILL_RETURN_IF_ERROR(cuda_->synchronize("growing a device collective's scratch"));
      cuda_->release(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    RILL_ASSIGN_OR_RETURN(scratch_, cuda_->allocate(bytes, "a device collective's scratch"));
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

Status GpuRank::unset(uint64_t tag) {
  return internal_error("{}: rank {} of {} acted before its communicator was made", what(tag), rank_, world_);
}

template <typename Call>
Status GpuRank::staged(const void* input, size_t in_bytes, void* output, size_t out_bytes, uint64_t tag, Call&& call) {
  const char* about = what(tag);
  one_in_.resize(std::max(one_in_.size(), in_bytes));
  one_out_.resize(std::max(one_out_.size(), out_bytes));
  RILL_RETURN_IF_ERROR(cuda_->copy(one_in_.data(), input, in_bytes, CopyKind::kDeviceToHost, about));
  RILL_RETURN_IF_ERROR(cuda_->synchronize(about));  // the bytes are there before the host reads them
  RILL_RETURN_IF_ERROR(call(one_in_.data(), one_out_.data()));
  return cuda_->copy(output, one_out_.data(), out_bytes, CopyKind::kHostToDevice, about);
}

Status GpuRank::all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                           std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) {
  if (nccl_ != nullptr)
    return nccl_->all_reduce(inputs, outputs, elements, dtype, static_cast<int>(op), *cuda_, timeout_,
                             what(tag));
  if (shared_ != nullptr) return shared_->all_reduce(inputs, outputs, elements, dtype, op, tag);
  if (host_ == nullptr) return unset(tag);
  const char* about = what(tag);
  // Grown only: the calls of one rank (buckets of other sizes) take turns.
  const size_t n = inputs.size();
  if (staged_.size() < n) {
    staged_.resize(n);
    in_.resize(n);
    out_.resize(n);
  }
  for (size_t k = 0; k < n; ++k) {
    const size_t bytes = elements[k] * dtype_size(dtype);
    staged_[k].resize(std::max(staged_[k].size(), bytes));
    RILL_RETURN_IF_ERROR(cuda_->copy(staged_[k].data(), inputs[k], bytes, CopyKind::kDeviceToHost, about));
    in_[k] = staged_[k].data();
    out_[k] = staged_[k].data();
  }
  RILL_RETURN_IF_ERROR(cuda_->synchronize(about));  // the bytes are there before the host reads them
  RILL_RETURN_IF_ERROR(host_->all_reduce(std::span<const void* const>(in_.data(), n),
                                         std::span<void* const>(out_.data(), n), elements, dtype, op, tag));
  for (size_t k = 0; k < n; ++k)
    RILL_RETURN_IF_ERROR(cuda_->copy(outputs[k], staged_[k].data(), elements[k] * dtype_size(dtype),
                                     CopyKind::kHostToDevice, about));
  return {};
}

Status GpuRank::reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                               comm::ReduceOp op, uint64_t tag) {
  if (counts.size() != static_cast<size_t>(world_)) return internal_error("{}: {} blocks", what(tag), counts.size());
  if (nccl_ != nullptr)
    return nccl_->reduce_scatter(input, output, counts, dtype, static_cast<int>(op), *cuda_, timeout_, what(tag));
  if (shared_ != nullptr) return shared_->reduce_scatter(input, output, counts, dtype, op, tag);
  if (host_ == nullptr) return unset(tag);
  const size_t element = dtype_size(dtype);
  const size_t all = std::accumulate(counts.begin(), counts.end(), size_t{0}) * element;
  return staged(input, all, output, counts[static_cast<size_t>(rank_)] * element, tag,
                [&](void* in, void* out) { return host_->reduce_scatter(in, out, counts, dtype, op, tag); });
}

Status GpuRank::all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                           uint64_t tag) {
  if (counts.size() != static_cast<size_t>(world_)) return internal_error("{}: {} blocks", what(tag), counts.size());
  if (nccl_ != nullptr) return nccl_->all_gather(input, output, counts, dtype, *cuda_, timeout_, what(tag));
  if (shared_ != nullptr) return shared_->all_gather(input, output, counts, dtype, tag);
  if (host_ == nullptr) return unset(tag);
  const size_t element = dtype_size(dtype);
  const size_t all = std::accumulate(counts.begin(), counts.end(), size_t{0}) * element;
  return staged(input, counts[static_cast<size_t>(rank_)] * element, output, all, tag,
                [&](void* in, void* out) { return host_->all_gather(in, out, counts, dtype, tag); });
}

Status GpuRank::all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                           std::span<const size_t> recv_counts, DType dtype, uint64_t tag) {
  if (send_counts.size() != static_cast<size_t>(world_) || recv_counts.size() != static_cast<size_t>(world_))
    return internal_error("{}: {} blocks sent, {} received", what(tag), send_counts.size(), recv_counts.size());
  if (nccl_ != nullptr)
    return nccl_->all_to_all(input, send_counts, output, recv_counts, dtype, *cuda_, timeout_, what(tag));
  if (shared_ != nullptr) return shared_->all_to_all(input, send_counts, output, recv_counts, dtype, tag);
  if (host_ == nullptr) return unset(tag);
  const size_t element = dtype_size(dtype);
  const size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0}) * element;
  const size_t got = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}) * element;
  return staged(input, sent, output, got, tag, [&](void* in, void* out) {
    return host_->all_to_all(in, send_counts, out, recv_counts, dtype, tag);
  });
}

}  // namespace rill
