// Messages between the node's threads and to other nodes: the actor bus.
#include "runtime/node/node_run.h"

#include <cstring>

#include <xxhash.h>

#include "runtime/node/actor_wire.h"
#include "runtime/node/plan_reader.h"

namespace rill {

// Delivers a message between threads: to a worker of this node, or over the
// transport to another node. A `ready` crossing nodes carries its slot's bytes
// (zero-copy: the slot is not rewritten before the consumer's ack returns),
// or, where at least a quarter of its rows are zeros, the other rows only
// (copied after the header; runtime/node/actor_wire.h). Each message is
// numbered on its link, and a slot's bytes carry their checksum (taken
// before the lock: the slot does not change until the reader acks).
void NodeRun::route(const ActorMsg& msg) {
  if (options_.drop_message && options_.drop_message(msg)) return;
  int node = static_cast<int>(ActorId::node(msg.dst));
  if (node != options_.node) {
    if (!options_.transport) {
      fail(internal_error("actor {} is on node {}, but this run has no transport", ActorId::to_string(msg.dst), node));
      return;
    }
    std::span<const std::byte> body;
    int64_t rows = 0;  // the slot's rows: a matrix's may cross with zero rows left out
    if (msg.type == MsgType::kReady && !msg.repeat) {  // slots_ is read-only while running: find, never insert
      auto it = slots_.find(msg.regst);
      if (it == slots_.end() || msg.slot < 0 || msg.slot >= static_cast<int>(it->second.size())) {
        fail(internal_error("ready for regst {} slot {}, which node {} does not hold", msg.regst, msg.slot,
                            options_.node));
        return;
      }
      const TensorView& slot = it->second[msg.slot];
      body = std::span<const std::byte>(static_cast<const std::byte*>(slot.data), slot.bytes());
      rows = zero_row_rows(slot.shape);
    }
    thread_local std::vector<std::byte> header;
    thread_local std::vector<uint8_t> kept;  // the rows that are not zeros
    WireExtras extras;
    extras.checksum = body.empty() ? 0 : XXH3_64bits(body.data(), body.size());
    extras.zero_rows = rows > 0 && mark_zero_rows(body, rows, &kept);
    Status sent;
    {
      // Numbered and sent in one go, so the link carries them in order.
      Link& link = *links_[static_cast<size_t>(node)];
      MutexLock lock(link.mu);
      extras.seq = ++link.sent;
      encode_actor_message(msg, &header, extras);
      if (extras.zero_rows) {
        append_kept_rows(body, rows, kept, &header);
        body = {};
      }
      const size_t cap = options_.transport->max_message_bytes();
      if (cap > 0 && std::max(header.size(), body.size()) > cap) {
        // The peer's ZeroMQ would refuse the frame and drop the connection.
        const plan::RegstDesc* desc = regst(msg.regst);
        sent = invalid_argument("regst '{}' ({} bytes) crosses from node {} to node {} in one message, larger than "
                                "the data plane takes (--max-message-bytes {})",
                                desc ? read_string(desc->name()) : std::to_string(msg.regst),
                                std::max(header.size(), body.size()), options_.node, node, cap);
      } else {
        sent = options_.transport->send(node, options_.tag_base, header, body, &sends_);
      }
    }
    if (!sent.ok()) fail(sent.with_context(fmt::format("sending {} to node {}", msg_type_name(msg.type), node)));
    else record_.message(true, node, static_cast<int64_t>(header.size() + body.size()));
    return;
  }
  auto it = worker_by_key_.find(ActorId::thread_key(msg.dst));
  if (it == worker_by_key_.end()) {
    fail(internal_error("no thread on node {} runs actor {}", options_.node, ActorId::to_string(msg.dst)));
    return;
  }
  it->second->push(msg);
}

// An actor message from another node (the transport's receive thread).
void NodeRun::receive(int from, const comm::MessageView& message) {
  ActorMsg msg;
  std::span<const std::byte> body;
  WireExtras extras;
  // The header is at the start of the first part; the body follows it there
  // (a small message) or is the second part, read in place.
  Status decoded = decode_actor_message(message.first, &msg, &body, &extras);
  const bool zero_rows = extras.zero_rows;
  if (decoded.ok() && !message.second.empty()) {
    if (!body.empty())
      decoded = data_loss("actor message body split across buffers ({} + {} bytes)", body.size(),
                          message.second.size());
    body = message.second;
  }
  if (decoded.ok() && static_cast<int>(ActorId::node(msg.dst)) != options_.node)
    decoded = data_loss("message for actor {} arrived at node {}", ActorId::to_string(msg.dst), options_.node);
  if (decoded.ok() && (from < 0 || from >= static_cast<int>(links_.size()) || from == options_.node))
    decoded = data_loss("message from node {}, which is not another node of this run", from);
  if (decoded.ok()) {
    // One message after the other: a gap, a repeat or a swap is a fault of
    // the link, never a message to act on.
    std::atomic<uint64_t>& received = links_[static_cast<size_t>(from)]->received;
    uint64_t due = received.load(std::memory_order_relaxed) + 1;
    if (extras.seq != due)
      decoded = data_loss("the link from node {} to node {}: message {} came where {} was due ({})", from,
                          options_.node, extras.seq, due,
                          extras.seq > due ? "a message was lost" : "a message came twice or out of order");
    else
      received.store(due, std::memory_order_relaxed);
  }
  if (decoded.ok() && msg.type == MsgType::kReady) {
    // The bytes go straight into the mirror slot the consumers read (a
    // repeat's came with an earlier ready of this slot, in order).
    auto it = slots_.find(msg.regst);
    if (it == slots_.end() || msg.slot < 0 || msg.slot >= static_cast<int>(it->second.size()) ||
        (msg.repeat ? !body.empty() || zero_rows
                    : !zero_rows && it->second[msg.slot].bytes() != body.size()) ||
        (zero_rows && zero_row_rows(it->second[msg.slot].shape) == 0)) {
      decoded = data_loss("ready for regst {} slot {} with {} bytes{} does not match this node's plan", msg.regst,
                          msg.slot, body.size(), msg.repeat ? " (a repeat)" : zero_rows ? " (zero rows left out)" : "");
    } else if (zero_rows) {
      const TensorView& slot = it->second[msg.slot];
      decoded = expand_zero_rows(body, zero_row_rows(slot.shape),
                                 std::span<std::byte>(static_cast<std::byte*>(slot.data), slot.bytes()))
                    .with_context(fmt::format("ready for regst {} slot {}", msg.regst, msg.slot));
      received_bytes_copied_.fetch_add(static_cast<int64_t>(body.size()), std::memory_order_relaxed);
      received_zero_row_readies_.fetch_add(1, std::memory_order_relaxed);
    } else if (!msg.repeat && !body.empty()) {
      std::memcpy(it->second[msg.slot].data, body.data(), body.size());
      received_bytes_copied_.fetch_add(static_cast<int64_t>(body.size()), std::memory_order_relaxed);
    }
    if (decoded.ok() && !msg.repeat) {
      const TensorView& slot = it->second[msg.slot];
      const uint64_t sum = slot.bytes() == 0 ? 0 : XXH3_64bits(slot.data, slot.bytes());
      if (sum != extras.checksum)
        decoded = data_loss("the link from node {} to node {}: regst {} slot {} arrived corrupted (checksum {:016x}, "
                            "sent as {:016x})",
                            from, options_.node, msg.regst, msg.slot, sum, extras.checksum);
    }
  }
  if (!decoded.ok()) {
    fail(decoded.with_context(fmt::format("message from node {}", from)));
    return;
  }
  record_.message(false, from, static_cast<int64_t>(message.size()));
  route(msg);
}

}  // namespace rill
