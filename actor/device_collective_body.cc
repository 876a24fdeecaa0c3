#include "actor/device_collective_body.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace rill {

DeviceCollectiveBody::DeviceCollectiveBody(DeviceCommunicator* communicator, CollectiveCall call,
                                           std::vector<TensorMeta> tensors, AxisBlocks blocks, AxisBlocks received,
                                           comm::ReduceOp op, uint64_t tag, std::string name)
    : communicator_(communicator),
      call_(call),
      tensors_(std::move(tensors)),
      op_(op),
      tag_(tag),
      name_(std::move(name)),
      blocks_(std::move(blocks)),
      received_(std::move(received)) {
  for (AxisBlocks* b : {&blocks_, &received_}) {
    b->outer = std::max<size_t>(b->outer, 1);
    b->slice = std::max<size_t>(b->slice, 1);
  }
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
  const auto world = static_cast<size_t>(communicator_->world());
  if (call_ != CollectiveCall::kAllReduce &&
      (blocks_.counts.size() != world || (call_ == CollectiveCall::kAllToAll && received_.counts.size() != world)))
    return internal_error("device collective '{}': {} blocks for {} ranks", name_, blocks_.counts.size(), world);
  Status status;
  switch (call_) {
    case CollectiveCall::kAllReduce: status = communicator_->all_reduce(in_, out_, elements_, dtype, op_, tag_); break;
    case CollectiveCall::kReduceScatter: {
      const void* input = in_[0];
      if (blocks_.outer > 1) {  // the blocks packed, each one's slices together
        auto packed = communicator_->scratch(elements_[0] * dtype_size(dtype));
        status = packed.status();
        if (status.ok())
          status = pack(blocks_, elements_[0], static_cast<std::byte*>(*packed), static_cast<const std::byte*>(in_[0]),
                        true);
        if (status.ok()) input = *packed;
      }
      if (status.ok()) status = communicator_->reduce_scatter(input, out_[0], blocks_.counts, dtype, op_, tag_);
      break;
    }
    case CollectiveCall::kAllGather: {
      if (blocks_.outer == 1) {
        status = communicator_->all_gather(in_[0], out_[0], blocks_.counts, dtype, tag_);
        break;
      }
      auto packed = communicator_->scratch(elements_[0] * dtype_size(dtype));
      status = packed.status();
      if (status.ok()) status = communicator_->all_gather(in_[0], *packed, blocks_.counts, dtype, tag_);
      if (status.ok())
        status = pack(blocks_, elements_[0], static_cast<std::byte*>(*packed), static_cast<std::byte*>(out_[0]), false);
      break;
    }
    case CollectiveCall::kAllToAll: status = all_to_all(dtype); break;
    case CollectiveCall::kReduce:
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

// The input's blocks (along the output's axis) packed where they are
// columns, sent, and the blocks received unpacked (along the input's axis)
// where they are: one scratch holds both, the sent first.
Status DeviceCollectiveBody::all_to_all(DType dtype) {
  const size_t element = dtype_size(dtype);
  const size_t sent = std::accumulate(blocks_.counts.begin(), blocks_.counts.end(), size_t{0});
  const size_t got = std::accumulate(received_.counts.begin(), received_.counts.end(), size_t{0});
  const size_t sent_bytes = blocks_.outer > 1 ? (sent * element + 255) / 256 * 256 : 0;
  const size_t scratch = sent_bytes + (received_.outer > 1 ? got * element : 0);
  std::byte* packed = nullptr;
  if (scratch > 0) {
    RILL_ASSIGN_OR_RETURN(void* at, communicator_->scratch(scratch));
    packed = static_cast<std::byte*>(at);
  }
  const void* input = in_[0];
  if (blocks_.outer > 1) {
    RILL_RETURN_IF_ERROR(pack(blocks_, sent, packed, static_cast<const std::byte*>(in_[0]), true));
    input = packed;
  }
  void* output = received_.outer > 1 ? packed + sent_bytes : out_[0];
  RILL_RETURN_IF_ERROR(communicator_->all_to_all(input, blocks_.counts, output, received_.counts, dtype, tag_));
  if (received_.outer > 1)
    RILL_RETURN_IF_ERROR(pack(received_, got, packed + sent_bytes, static_cast<std::byte*>(out_[0]), false));
  return {};
}

Status DeviceCollectiveBody::pack(const AxisBlocks& b, size_t elements, std::byte* packed, const std::byte* tensor,
                                  bool into_packed) {
  const size_t element = dtype_size(tensors_[0].dtype);
  const size_t slice = b.slice * element;
  const size_t slices = elements / (b.outer * b.slice);  // the tensor's along the split axis
  size_t packed_at = 0, first = 0;                      // bytes into the packed blocks; the block's first slice
  for (size_t count : b.counts) {
    const size_t width = count / b.outer * element;  // one row of this block: its slices
    void* dst = into_packed ? static_cast<void*>(packed + packed_at) : const_cast<std::byte*>(tensor) + first * slice;
    const void* src = into_packed ? static_cast<const void*>(tensor + first * slice) : packed + packed_at;
    RILL_RETURN_IF_ERROR(communicator_->copy_rows(dst, into_packed ? width : slices * slice, src,
                                                  into_packed ? slices * slice : width, width, b.outer));
    packed_at += width * b.outer;
    first += count / (b.outer * b.slice);
  }
  return {};
}

std::string DeviceCollectiveBody::collective() const {
  return communicator_ == nullptr ? std::string()
                                  : fmt::format("{} {}", collective_call_name(call_), communicator_->backend());
}

}  // namespace rill
