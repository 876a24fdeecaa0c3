#include "comm/wire.h"

#include <cctype>
#include <cstdint>
#include <cstring>

namespace rill::comm {
namespace {

bool aligned8(const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

std::string printable(std::span<const std::byte> bytes) {
  std::string out;
  for (std::byte b : bytes) {
    auto c = static_cast<unsigned char>(b);
    out += std::isprint(c) ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  return out;
}

}  // namespace

const char* message_name(wire::Message type) {
  const char* name = wire::EnumNameMessage(type);
  return name[0] == '\0' ? "unknown" : name;
}

std::vector<std::byte> encode_envelope(const wire::EnvelopeT& envelope) {
  flatbuffers::FlatBufferBuilder builder;
  wire::FinishSizePrefixedEnvelopeBuffer(builder, wire::Envelope::Pack(builder, &envelope));
  auto* data = reinterpret_cast<const std::byte*>(builder.GetBufferPointer());
  return std::vector<std::byte>(data, data + builder.GetSize());
}

StatusOr<Parsed<wire::Envelope>> parse_envelope(std::span<const std::byte> bytes) {
  // Size-prefixed, so that a truncated buffer is told apart from one that
  // merely lost trailing padding.
  constexpr size_t kPrefix = sizeof(flatbuffers::uoffset_t);
  constexpr size_t kHeaderBytes = 2 * kPrefix + flatbuffers::kFileIdentifierLength;
  if (bytes.size() < kHeaderBytes) {
    return data_loss("wire: expected an Envelope (identifier {}), got only {} bytes", wire::EnvelopeIdentifier(),
                     bytes.size());
  }
  auto identifier = bytes.subspan(2 * kPrefix, flatbuffers::kFileIdentifierLength);
  if (std::memcmp(identifier.data(), wire::EnvelopeIdentifier(), identifier.size()) != 0) {
    return data_loss("wire: expected an Envelope (identifier {}), got identifier '{}' ({} bytes)",
                     wire::EnvelopeIdentifier(), printable(identifier), bytes.size());
  }
  flatbuffers::uoffset_t size = 0;
  std::memcpy(&size, bytes.data(), kPrefix);
  if (size != bytes.size() - kPrefix) {
    return data_loss("wire: truncated or padded Envelope: {} bytes where its size prefix says {}", bytes.size(),
                     size + kPrefix);
  }
  std::vector<std::byte> copy;
  const std::byte* data = bytes.data();
  if (!aligned8(data)) {
    copy.assign(bytes.begin(), bytes.end());
    data = copy.data();
  }
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(data), bytes.size());
  if (!wire::VerifySizePrefixedEnvelopeBuffer(verifier)) {
    return data_loss("wire: corrupt Envelope ({} bytes): verification failed", bytes.size());
  }
  const wire::Envelope* envelope = wire::GetSizePrefixedEnvelope(data);
  if (envelope->message_type() == wire::Message::NONE || envelope->message() == nullptr) {
    return data_loss("wire: the Envelope ({} bytes) holds no message", bytes.size());
  }
  return Parsed<wire::Envelope>(envelope, std::move(copy));
}

std::span<const std::byte> encode_actor_messages(flatbuffers::FlatBufferBuilder& builder,
                                                 std::span<const wire::ActorMessageHeader> messages) {
  builder.Clear();
  auto vector = builder.CreateVectorOfStructs(messages.data(), messages.size());
  builder.FinishSizePrefixed(wire::CreateActorMessages(builder, vector));
  return {reinterpret_cast<const std::byte*>(builder.GetBufferPointer()), builder.GetSize()};
}

StatusOr<ActorMessagesView> parse_actor_messages(std::span<const std::byte> message) {
  if (!aligned8(message.data())) {
    return internal_error("wire: actor messages at {} are not 8-byte aligned", static_cast<const void*>(message.data()));
  }
  flatbuffers::uoffset_t header_size = 0;
  if (message.size() >= sizeof header_size) std::memcpy(&header_size, message.data(), sizeof header_size);
  if (message.size() < sizeof header_size || header_size > message.size() - sizeof header_size) {
    return data_loss("wire: expected a size-prefixed ActorMessages header, got a message of {} bytes (prefix says {})",
                     message.size(), header_size);
  }
  const size_t prefixed = sizeof header_size + header_size;
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(message.data()), prefixed);
  if (!verifier.VerifySizePrefixedBuffer<wire::ActorMessages>(nullptr)) {
    return data_loss("wire: corrupt or truncated ActorMessages header ({} of {} bytes): verification failed",
                     prefixed, message.size());
  }
  ActorMessagesView view;
  view.header = flatbuffers::GetSizePrefixedRoot<wire::ActorMessages>(message.data());
  view.body = message.subspan(prefixed);
  for (const wire::ActorMessageHeader* m : *view.header->messages()) {
    if (static_cast<uint8_t>(m->type()) > static_cast<uint8_t>(wire::ActorMessageType::MAX)) {
      return data_loss("wire: actor message {} -> {} has unknown type {}", m->src(), m->dst(),
                       static_cast<int>(m->type()));
    }
    if (m->payload_offset() > view.body.size() || m->payload_size() > view.body.size() - m->payload_offset()) {
      return data_loss("wire: actor message {} -> {} points at payload bytes [{}, +{}) beyond the {}-byte body",
                       m->src(), m->dst(), m->payload_offset(), m->payload_size(), view.body.size());
    }
  }
  return view;
}

}  // namespace rill::comm
