#include <cstring>

#include "actor/body.h"

namespace rill {

Status CopyBody::act(const ActIo& io) {
  if (io.inputs[0]->bytes() != io.outputs[0]->bytes())
    return internal_error("copy: input holds {} bytes, output {}", io.inputs[0]->bytes(), io.outputs[0]->bytes());
  if (!cuda_) {
    std::memcpy(io.outputs[0]->data, io.inputs[0]->data, io.inputs[0]->bytes());
    return {};
  }
  RILL_RETURN_IF_ERROR(cuda_->activate(name_.c_str()));
  RILL_RETURN_IF_ERROR(cuda_->copy(io.outputs[0]->data, io.inputs[0]->data, io.inputs[0]->bytes(), kind_, name_.c_str()));
  // Until the copy is done, neither the host slot it reads may be reused nor
  // the host slot it writes be read. Waiting also reports what the device
  // found wrong in the work enqueued before (a bad label).
  return cuda_->synchronize(name_.c_str());
}

}  // namespace rill
