#include <algorithm>
#include <cstring>

#include "actor/body.h"

namespace rill {

StatusOr<void*> CopyBody::event_for(const void* data) {
  for (Freed& f : freed_)
    if (f.data == data) return f.event.get();
  RILL_ASSIGN_OR_RETURN(void* event, cuda_->create_event(name_.c_str()));  // once per slot
  freed_.push_back({data, DeviceEvent(event, EventFree{cuda_})});
  return event;
}

Status CopyBody::slot_back(const void* data) {
  if (!cuda_ || kind_ != CopyKind::kHostToDevice) return {};
  RILL_ASSIGN_OR_RETURN(void* event, event_for(data));
  RILL_RETURN_IF_ERROR(cuda_->mark(event, name_.c_str()));
  if (std::find(marked_.begin(), marked_.end(), data) == marked_.end()) marked_.push_back(data);
  return {};
}

Status CopyBody::act(const ActIo& io) {
  if (io.inputs[0]->bytes() != io.outputs[0]->bytes())
    return internal_error("copy: input holds {} bytes, output {}", io.inputs[0]->bytes(), io.outputs[0]->bytes());
  if (!cuda_) {
    std::memcpy(io.outputs[0]->data, io.inputs[0]->data, io.inputs[0]->bytes());
    return {};
  }
  RILL_RETURN_IF_ERROR(cuda_->activate(name_.c_str()));
  // Enqueued only: the host slot it reads goes back to its producer, and the
  // host slot it writes to its readers, when the copy is complete (the
  // device thread holds those messages until its event; runtime/node/worker.h).
  void* after = nullptr;
  if (kind_ == CopyKind::kHostToDevice) {
    // The slot's last reader; a slot never written before has none.
    const void* slot = io.outputs[0]->data;
    if (std::find(marked_.begin(), marked_.end(), slot) != marked_.end()) {
      RILL_ASSIGN_OR_RETURN(after, event_for(slot));
    }
  } else {
    if (!produced_) {
      RILL_ASSIGN_OR_RETURN(void* event, cuda_->create_event(name_.c_str()));
      produced_ = DeviceEvent(event, EventFree{cuda_});
    }
    RILL_RETURN_IF_ERROR(cuda_->mark(produced_.get(), name_.c_str()));
    after = produced_.get();
  }
  return cuda_->copy_beside(io.outputs[0]->data, io.inputs[0]->data, io.inputs[0]->bytes(), kind_, after,
                            name_.c_str());
}

}  // namespace rill
