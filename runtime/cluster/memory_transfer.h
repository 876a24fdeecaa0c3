// Node 0's memory to a node that comes back (live membership), over the
// data plane. A newcomer starts from the model and optimizer state node 0
// kept; they go as one control-encoded message (a PlanPart holding only
// the tensors, checksummed and verified when decoded) cut into chunks,
// sealed with the cluster key as every data-plane message is, instead of
// inside the newcomer's plan part, which --max-message-bytes bounds (GPT-2
// 124M with AdamW's state is 1.5 GB).
//
// The exchange uses two tags at the top of the phase's range, which no run
// uses (kMemoryAckTag, kMemoryChunkTag): the newcomer opens the phase's
// tags and says it is ready; node 0 sends kMemoryWindow chunks of
// kMemoryChunkBytes and waits for their ack before the next window, so at
// most a window waits unread at the newcomer. Either side waits for the
// other's next message at most `patience` (a slow link that moves is never
// cut), and fails at once when the transport finds the other gone.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "comm/transport.h"
#include "runtime/node/node_runtime.h"

namespace rill {

inline constexpr uint64_t kMemoryAckTag = kTagsPerRun - 2, kMemoryChunkTag = kTagsPerRun - 1;
inline constexpr size_t kMemoryChunkBytes = size_t{1} << 20;  // what collectives move: every transport takes it
inline constexpr int kMemoryWindow = 16;
// Node 0's memory goes as messages of at most this many bytes each (a
// FlatBuffer holds at most 2 GiB); a tensor larger than one is refused.
// Within that, a message holds at most --max-message-bytes of tensors (a
// larger tensor goes alone): the newcomer holds one message's bytes and
// its decoded tensors at a time.
inline constexpr size_t kMemoryMessageBytes = size_t{1} << 30;

// Node 0: sends `bytes` to rank `to` once it is ready (every chunk
// acknowledged before it returns), the tags of the phase at `tag_base`,
// which node 0 opened before the newcomer's part went (its ready may come
// at once).
Status send_memory(comm::Transport& transport, int to, uint64_t tag_base, std::string_view bytes,
                   std::chrono::milliseconds patience);

// The newcomer: opens the phase's tags, says it is ready, and receives
// exactly `bytes` bytes from rank 0.
StatusOr<std::string> receive_memory(comm::Transport& transport, uint64_t tag_base, size_t bytes,
                                     std::chrono::milliseconds patience);

}  // namespace rill
