#include "actor/device_collective_body.h"

#include <algorithm>
#include <utility>

namespace rill {

DeviceCollectiveBody::DeviceCollectiveBody(DeviceCommunicator* communicator, CollectiveCall call,
                                           std::vector<TensorMeta> tensors, std::vector<size_t> counts,
                                           comm::ReduceOp op, uint64_t tag, std::string name)
    : communicator_(communicator),
      call_(call),
      tensors_(std::move(tensors)),
      counts_(std::move(counts)),
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
    case CollectiveCall::kReduceScatter:
      status = communicator_->reduce_scatter(in_[0], out_[0], counts_, dtype, op_, tag_);
      break;
    case CollectiveCall::kAllGather:
      status = communicator_->all_gather(in_[0], out_[0], counts_, dtype, tag_);
      break;
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

std::string DeviceCollectiveBody::collective() const {
  return communicator_ == nullptr ? std::string()
                                  : fmt::format("{} {}", collective_call_name(call_), communicator_->backend());
}

}  // namespace rill
