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
#include <vector>

#include "base/status.h"
#include "comm/transport.h"
#include "runtime/node/node_runtime.h"

namespace rill {

inline constexpr uint64_t kMemoryAckTag = kTagsPerRun - 2, kMemoryChunkTag = kTagsPerRun - 1;
// A run's replica of each node's pieces on its buddy (replicator.h), and
// the pieces node 0 gathers to go on without a lost node (master_gather.cc):
// streams of their own, below node 0's memory.
inline constexpr uint64_t kReplicaAckTag = kTagsPerRun - 4, kReplicaChunkTag = kTagsPerRun - 3;
inline constexpr uint64_t kGatherAckTag = kTagsPerRun - 6, kGatherChunkTag = kTagsPerRun - 5;
inline constexpr size_t kMemoryChunkBytes = size_t{1} << 20;  // what collectives move: every transport takes it
inline constexpr int kMemoryWindow = 16;

// Tags of one stream of messages: the sender's chunks, the receiver's acks.
struct StreamTags {
  uint64_t chunk = 0, ack = 0;
};

// What a stream's receiver learns before each message: message `index` of
// `count` of the pieces a node held after `step` steps, `bytes` long.
struct StreamHeader {
  int64_t step = 0;
  uint64_t index = 0, count = 0, bytes = 0;
};
// The most messages of one stream (a model of 2^16 messages of at most
// kMemoryMessageBytes each); a header saying more is malformed.
inline constexpr uint64_t kMostStreamMessages = uint64_t{1} << 16;

// One message of a stream to `to`: its header, then its bytes in windows of
// acknowledged chunks (as node 0's memory). No ready is waited for: the
// receiver's tags are open already (a run's, or node 0's for the gather).
// A header of count 0 and no bytes says there is nothing to send.
Status send_stream_message(comm::Transport& transport, int to, StreamTags tags, const StreamHeader& header,
                           std::string_view bytes, std::chrono::milliseconds patience);
// Every message of `messages` (the pieces after `step` steps) in order, or,
// when there are none, a header that says so.
Status send_stream(comm::Transport& transport, int to, StreamTags tags, int64_t step,
                   const std::vector<std::string>& messages, std::chrono::milliseconds patience);
// The next header from `from`, by `deadline` (kDeadlineExceeded: none yet);
// one past `max_bytes` is kDataLoss.
StatusOr<StreamHeader> receive_stream_header(comm::Transport& transport, int from, StreamTags tags,
                                             comm::Clock::time_point deadline, size_t max_bytes);
// The bytes that follow `header`, each chunk within `patience`.
StatusOr<std::string> receive_stream_body(comm::Transport& transport, int from, StreamTags tags,
                                          const StreamHeader& header, std::chrono::milliseconds patience);

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
