#include "runtime/node/gpu_rank.h"

#include <utility>

namespace rill {

std::string GpuRank::what(uint64_t tag) const {
  return fmt::format("collective tag {} on cuda:{}{}", tag, cuda_->device(),
                     host_ != nullptr ? " through host memory" : "");
}

Status GpuRank::unset(uint64_t tag) const {
  return internal_error("{}: rank {} of {} acted before its communicator was made", what(tag), rank_, world_);
}

template <typename Call>
Status GpuRank::staged(const void* input, size_t in_bytes, void* output, size_t out_bytes, uint64_t tag, Call&& call) {
  const std::string about = what(tag);
  staged_.resize(2);
  staged_[0].resize(in_bytes);
  staged_[1].resize(out_bytes);
  RILL_RETURN_IF_ERROR(cuda_->copy(staged_[0].data(), input, in_bytes, CopyKind::kDeviceToHost, about.c_str()));
  RILL_RETURN_IF_ERROR(call(staged_[0].data(), staged_[1].data()));
  return cuda_->copy(output, staged_[1].data(), out_bytes, CopyKind::kHostToDevice, about.c_str());
}

Status GpuRank::all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                           std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) {
  if (nccl_ != nullptr)
    return nccl_->all_reduce(inputs, outputs, elements, dtype, static_cast<int>(op), *cuda_, timeout_,
                             what(tag).c_str());
  if (host_ == nullptr) return unset(tag);
  const std::string about = what(tag);
  staged_.resize(inputs.size());
  in_.resize(inputs.size());
  out_.resize(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    staged_[k].resize(elements[k] * dtype_size(dtype));
    RILL_RETURN_IF_ERROR(
        cuda_->copy(staged_[k].data(), inputs[k], staged_[k].size(), CopyKind::kDeviceToHost, about.c_str()));
    in_[k] = staged_[k].data();
    out_[k] = staged_[k].data();
  }
  RILL_RETURN_IF_ERROR(host_->all_reduce(in_, out_, elements, dtype, op, tag));
  for (size_t k = 0; k < outputs.size(); ++k)
    RILL_RETURN_IF_ERROR(
        cuda_->copy(outputs[k], staged_[k].data(), staged_[k].size(), CopyKind::kHostToDevice, about.c_str()));
  return {};
}

Status GpuRank::reduce_scatter(const void* input, void* output, size_t block, DType dtype, comm::ReduceOp op,
                               uint64_t tag) {
  if (nccl_ != nullptr)
    return nccl_->reduce_scatter(input, output, block, dtype, static_cast<int>(op), *cuda_, timeout_,
                                 what(tag).c_str());
  if (host_ == nullptr) return unset(tag);
  const size_t bytes = block * dtype_size(dtype);
  return staged(input, bytes * static_cast<size_t>(world_), output, bytes, tag,
                [&](void* in, void* out) { return host_->reduce_scatter(in, out, block, dtype, op, tag); });
}

Status GpuRank::all_gather(const void* input, void* output, size_t block, DType dtype, uint64_t tag) {
  if (nccl_ != nullptr) return nccl_->all_gather(input, output, block, dtype, *cuda_, timeout_, what(tag).c_str());
  if (host_ == nullptr) return unset(tag);
  const size_t bytes = block * dtype_size(dtype);
  return staged(input, bytes, output, bytes * static_cast<size_t>(world_), tag,
                [&](void* in, void* out) { return host_->all_gather(in, out, block, dtype, tag); });
}

}  // namespace rill
