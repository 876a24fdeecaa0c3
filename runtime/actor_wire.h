// Encoding of actor messages for the data plane between nodes (FlatBuffers,
// runtime/actor_message.fbs). Pure functions; any thread.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "actor/message.h"
#include "base/status.h"

namespace rill {

// Writes `msg` as a size-prefixed ActorMessage into `out` (reused, so steady
// state does not allocate once it has grown).
void encode_actor_message(const ActorMsg& msg, std::vector<std::byte>* out);
// Verifies and reads a message; `body` is what follows the header.
Status decode_actor_message(std::span<const std::byte> message, ActorMsg* msg, std::span<const std::byte>* body);

}  // namespace rill
