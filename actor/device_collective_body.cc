#include "actor/device_collective_body.h"

#include <utility>

namespace rill {

DeviceCollectiveBody::DeviceCollectiveBody(DeviceCommunicator* communicator, std::vector<TensorMeta> tensors,
                                           comm::ReduceOp op, uint64_t tag, std::string name)
    : communicator_(communicator), tensors_(std::move(tensors)), op_(op), tag_(tag), name_(std::move(name)) {
  for (const TensorMeta& t : tensors_) elements_.push_back(static_cast<size_t>(num_elements(t.shape)));
  in_.resize(tensors_.size());
  out_.resize(tensors_.size());
}

Status DeviceCollectiveBody::act(const ActIo& io) {
  const size_t n = tensors_.size();
  // Inputs: the tensors, then control regsts (order only); outputs: the
  // tensors, then at most one control regst.
  if (communicator_ == nullptr || n == 0 || io.inputs.size() < n || io.outputs.size() < n)
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
  Status status = communicator_->all_reduce(in_, out_, elements_, dtype, op_, tag_);
  if (!status.ok())
    return status.with_context(fmt::format("device collective '{}' (all_reduce {}, rank {} of {})", name_,
                                           communicator_->backend(), communicator_->rank(),
                                           communicator_->world()));
  return {};
}

std::string DeviceCollectiveBody::collective() const {
  return communicator_ == nullptr ? std::string() : fmt::format("all_reduce {}", communicator_->backend());
}

}  // namespace rill
