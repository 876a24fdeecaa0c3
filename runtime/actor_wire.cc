#include "runtime/actor_wire.h"

#include <cstring>

#include <flatbuffers/flatbuffers.h>

#include "runtime/actor_message_generated.h"

namespace rill {

void encode_actor_message(const ActorMsg& msg, std::vector<std::byte>* out) {
  thread_local flatbuffers::FlatBufferBuilder builder(128);
  builder.Clear();
  auto offset = wire::CreateActorMessage(builder, msg.src, msg.dst, static_cast<uint8_t>(msg.type), msg.slot,
                                         msg.regst, msg.step, msg.repeat);
  builder.FinishSizePrefixed(offset);
  out->resize(builder.GetSize());
  std::memcpy(out->data(), builder.GetBufferPointer(), builder.GetSize());
}

Status decode_actor_message(std::span<const std::byte> message, ActorMsg* msg, std::span<const std::byte>* body) {
  const auto* data = reinterpret_cast<const uint8_t*>(message.data());
  if (message.size() < sizeof(flatbuffers::uoffset_t))
    return data_loss("actor message of {} bytes is shorter than its size prefix", message.size());
  size_t header = flatbuffers::GetPrefixedSize(data) + sizeof(flatbuffers::uoffset_t);
  if (header > message.size())
    return data_loss("actor message header claims {} bytes, the message holds {}", header, message.size());
  flatbuffers::Verifier verifier(data, header);
  if (!verifier.VerifySizePrefixedBuffer<wire::ActorMessage>(nullptr))
    return data_loss("actor message header fails verification");
  const wire::ActorMessage* m = flatbuffers::GetSizePrefixedRoot<wire::ActorMessage>(data);
  if (m->type() > static_cast<uint8_t>(MsgType::kEord)) return data_loss("actor message of unknown type {}", m->type());
  *msg = ActorMsg{m->src(), m->dst(), static_cast<MsgType>(m->type()), m->slot(), m->regst(), m->step(), m->repeat()};
  *body = message.subspan(header);
  return {};
}

}  // namespace rill
