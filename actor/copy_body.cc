#include <cstring>

#include "actor/body.h"

namespace rill {

Status CopyBody::act(const ActIo& io) {
  if (io.inputs[0]->bytes() != io.outputs[0]->bytes())
    return internal_error("copy: input holds {} bytes, output {}", io.inputs[0]->bytes(), io.outputs[0]->bytes());
  std::memcpy(io.outputs[0]->data, io.inputs[0]->data, io.inputs[0]->bytes());
  return {};
}

}  // namespace rill
