// Wire: building and reading the FlatBuffers messages of comm/wire.fbs.
// Control-plane messages travel as one size-prefixed Envelope each; data-plane actor
// messages as a size-prefixed ActorMessages header followed by the payload.
//
// Reading always verifies first: a corrupt, truncated or foreign buffer is a
// kDataLoss Status naming what was expected, never a crash. Pure functions;
// any thread.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "base/status.h"
#include "comm/wire_generated.h"

namespace rill::comm {

// Encodes an Envelope holding `message`, given in object-API form
// (wire::JoinT, wire::HeartbeatT, ...).
std::vector<std::byte> encode_envelope(const wire::EnvelopeT& envelope);
template <typename NativeMessage>
std::vector<std::byte> encode_message(NativeMessage message) {
  static_assert(wire::MessageUnionTraits<NativeMessage>::enum_value != wire::Message::NONE,
                "encode_message takes a wire::...T message");
  wire::EnvelopeT envelope;
  envelope.message.Set(std::move(message));
  return encode_envelope(envelope);
}

// A verified FlatBuffers table. It points into the caller's bytes when they
// were 8-byte aligned (keep them alive), else into an aligned copy it holds.
template <typename Table>
class Parsed {
 public:
  Parsed(const Table* table, std::vector<std::byte> copy) : table_(table), copy_(std::move(copy)) {}
  const Table* get() const { return table_; }
  const Table* operator->() const { return table_; }
  const Table& operator*() const { return *table_; }
  // Hands over the aligned copy (if any); pointers into it stay valid.
  std::vector<std::byte> release_copy() { return std::move(copy_); }

 private:
  const Table* table_;
  std::vector<std::byte> copy_;  // its buffer does not move when Parsed moves
};

// Verifies `bytes` as an Envelope holding some message.
StatusOr<Parsed<wire::Envelope>> parse_envelope(std::span<const std::byte> bytes);
// The result may point into the bytes: a temporary would dangle.
StatusOr<Parsed<wire::Envelope>> parse_envelope(std::vector<std::byte>&& bytes) = delete;

// Verifies `bytes` as an Envelope holding a `Message` (wire::Join, ...);
// another message type is kDataLoss naming both.
template <typename Message>
StatusOr<Parsed<Message>> parse_message(std::span<const std::byte> bytes);
template <typename Message>
StatusOr<Parsed<Message>> parse_message(std::vector<std::byte>&& bytes) = delete;

const char* message_name(wire::Message type);

// ---- data plane ------------------------------------------------------------

// Writes `messages` as a size-prefixed ActorMessages header into `builder`
// (cleared first; reuse it, so steady state allocates nothing) and returns
// the bytes, valid until the builder changes. The body to send after it
// holds the payloads the headers point at.
std::span<const std::byte> encode_actor_messages(flatbuffers::FlatBufferBuilder& builder,
                                                 std::span<const wire::ActorMessageHeader> messages);

struct ActorMessagesView {
  const wire::ActorMessages* header = nullptr;
  std::span<const std::byte> body;  // what follows the header
  // The payload of messages()[i] (empty when it has none).
  std::span<const std::byte> payload(const wire::ActorMessageHeader& message) const {
    return body.subspan(message.payload_offset(), message.payload_size());
  }
};

// Verifies a whole data-plane message (header + body) in place; every
// payload range lies in the body and every type is known. `message` must be
// 8-byte aligned (transport handlers get aligned spans).
StatusOr<ActorMessagesView> parse_actor_messages(std::span<const std::byte> message);

// ---- templates ---------------------------------------------------------------

template <typename Message>
StatusOr<Parsed<Message>> parse_message(std::span<const std::byte> bytes) {
  constexpr wire::Message expected = wire::MessageTraits<Message>::enum_value;
  static_assert(expected != wire::Message::NONE, "parse_message takes a wire message table type");
  auto envelope = parse_envelope(bytes);
  if (!envelope.ok()) {
    return envelope.status().with_context(fmt::format("expected a {} message", message_name(expected)));
  }
  if (envelope->get()->message_type() != expected) {
    return data_loss("wire: expected a {} message, got {}", message_name(expected),
                     message_name(envelope->get()->message_type()));
  }
  const Message* message = envelope->get()->template message_as<Message>();
  return Parsed<Message>(message, envelope->release_copy());
}

}  // namespace rill::comm
