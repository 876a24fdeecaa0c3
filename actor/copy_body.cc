#include <cstring>

#include "actor/body.h"

namespace rill {

void* CopyBody::freed_event(const void* data) const {
  for (const Freed& f : freed_)
    if (f.data == data) return f.event.get();
  return nullptr;
}

Status CopyBody::slot_back(const void* data) {
  if (!cuda_ || kind_ == CopyKind::kDeviceToHost) return {};
  void* event = freed_event(data);
  if (event == nullptr) {  // the slot's first return: its event, once
    RILL_ASSIGN_OR_RETURN(event, cuda_->create_event(name_.c_str()));
    freed_.push_back({data, DeviceEvent(event, EventFree{cuda_})});
  }
  return cuda_->mark(event, name_.c_str());
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
  if (kind_ != CopyKind::kDeviceToHost) {
    after = freed_event(io.outputs[0]->data);  // the slot's last readers (none before its first return)
    if (kind_ == CopyKind::kDeviceToDevice)
      return cuda_->copy_peer(io.outputs[0]->data, io.inputs[0]->data, src_device_, io.inputs[0]->bytes(), after,
                              name_.c_str());
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
