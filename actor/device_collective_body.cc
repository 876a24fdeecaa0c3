#include "actor/device_collective_body.h"

#include <algorithm>
#include <utility>

namespace rill {

DeviceCollectiveBody::DeviceCollectiveBody(DeviceCommunicator* communicator, CollectiveCall call,
                                           std::vector<TensorMeta> tensors, std::vector<size_t> counts, size_t outer,
                                           size_t slice, comm::ReduceOp op, uint64_t tag, std::string name)
    : communicator_(communicator),
      call_(call),
      tensors_(std::move(tensors)),
      counts_(std::move(counts)),
      outer_(std::max<size_t>(outer, 1)),
      slice_(std::max<size_t>(slice, 1)),
      op_(op),
      tag_(tag),
      name_(std::move(name)) {
  for (const TensorMeta& t : tensors_) elements_.push_back(static_cast<size_t>(num_elements(t.shape)));
  in_.resize(tensors_.size());
  out_.resize(tensors_.size());
}

Status DeviceCollectiveBody::act(const ActIo& io) {
  const size_t n = tensors_.size();
  // Inputs: the tensors, then control regsts (order only); outputs: the
  // tensors, then at most one control regst.
  if (communicator_ == nullptr || n == 0 || io.inputs.size() < n || io.outputs.size() < n ||
      (call_ != CollectiveCall::kAllReduce && n != 1))
    return internal_error("device collective '{}': {} tensors, {} inputs, {} outputs{}", name_, n, io.inputs.size(),
                          io.outputs.size(), communicator_ == nullptr ? ", no communicator" : "");
  const DType dtype = tensors_[0].dtype;
  for (size_t k = 0; k < n; ++k) {
    if (tensors_[k].dtype != dtype)
      return internal_error("device collective '{}': tensors of {} and {} in one call", name_,
                            dtype_name(dtype), dtype_name(tensors_[k].dtype));
    in_[k] = io.inputs[k]->data;
    out_[k] = io.outputs[k]->data;
  }
  if (call_ != CollectiveCall::kAllReduce && counts_.size() != static_cast<size_t>(communicator_->world()))
    return internal_error("device collective '{}': {} blocks for {} ranks", name_, counts_.size(),
                          communicator_->world());
  Status status;
  switch (call_) {
    case CollectiveCall::kAllReduce: status = communicator_->all_reduce(in_, out_, elements_, dtype, op_, tag_); break;
    case CollectiveCall::kReduceScatter: {
      const void* input = in_[0];
      if (outer_ > 1) {  // the blocks packed, each one's slices together
        auto packed = communicator_->scratch(elements_[0] * dtype_size(dtype));
        status = packed.status();
        if (status.ok()) status = pack(static_cast<std::byte*>(*packed), static_cast<const std::byte*>(in_[0]), true);
        if (status.ok()) input = *packed;
      }
      if (status.ok()) status = communicator_->reduce_scatter(input, out_[0], counts_, dtype, op_, tag_);
      break;
    }
    case CollectiveCall::kAllGather: {
      if (outer_ == 1) {
        status = communicator_->all_gather(in_[0], out_[0], counts_, dtype, tag_);
        break;
      }
      auto packed = communicator_->scratch(elements_[0] * dtype_size(dtype));
      status = packed.status();
      if (status.ok()) status = communicator_->all_gather(in_[0], *packed, counts_, dtype, tag_);
      if (status.ok()) status = pack(static_cast<std::byte*>(*packed), static_cast<std::byte*>(out_[0]), false);
      break;
    }
    case CollectiveCall::kReduce:
    case CollectiveCall::kAllToAll:
    case CollectiveCall::kOther:
      status = internal_error("not a device collective's call: {}", collective_call_name(call_));
      break;
  }
  if (!status.ok())
    return status.with_context(fmt::format("device collective '{}' ({} {}, rank {} of {})", name_,
                                           collective_call_name(call_), communicator_->backend(),
                                           communicator_->rank(), communicator_->world()));
  return {};
}

Status DeviceCollectiveBody::pack(std::byte* packed, const std::byte* tensor, bool into_packed) {
  const size_t element = dtype_size(tensors_[0].dtype);
  const size_t slice = slice_ * element;
  const size_t slices = elements_[0] / (outer_ * slice_);  // the tensor's along the split axis
  size_t packed_at = 0, first = 0;                         // bytes into the packed blocks; the block's first slice
  for (size_t count : counts_) {
    const size_t width = count / outer_ * element;  // one row of this block: its slices
    void* dst = into_packed ? static_cast<void*>(packed + packed_at) : const_cast<std::byte*>(tensor) + first * slice;
    const void* src = into_packed ? static_cast<const void*>(tensor + first * slice) : packed + packed_at;
    RILL_RETURN_IF_ERROR(communicator_->copy_rows(dst, into_packed ? width : slices * slice, src,
                                                  into_packed ? slices * slice : width, width, outer_));
    packed_at += width * outer_;
    first += count / (outer_ * slice_);
  }
  return {};
}

std::string DeviceCollectiveBody::collective() const {
  return communicator_ == nullptr ? std::string()
                                  : fmt::format("{} {}", collective_call_name(call_), communicator_->backend());
}

}  // namespace rill
