#include "actor/body.h"

namespace rill {

SourceBody::SourceBody(std::shared_ptr<const Dataset> dataset, std::vector<int> fields, BatchSampler sampler)
    : dataset_(std::move(dataset)), fields_(std::move(fields)), sampler_(std::move(sampler)) {
  indices_.resize(static_cast<size_t>(sampler_.local_batch()));
}

Status SourceBody::act(const ActIo& io) {
  sampler_.indices(io.step, io.micro, indices_);
  for (size_t f = 0; f < fields_.size(); ++f) dataset_->gather(fields_[f], indices_, io.outputs[f]->data);
  return {};
}

}  // namespace rill
