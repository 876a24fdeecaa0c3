#include "runtime/node/actor_wire.h"

#include <cstring>

#include <flatbuffers/flatbuffers.h>

#include "runtime/node/actor_message_generated.h"

namespace rill {

void encode_actor_message(const ActorMsg& msg, std::vector<std::byte>* out, const WireExtras& extras) {
  thread_local flatbuffers::FlatBufferBuilder builder(128);
  builder.Clear();
  auto offset = wire::CreateActorMessage(builder, msg.src, msg.dst, static_cast<uint8_t>(msg.type), msg.slot,
                                         msg.regst, msg.step, msg.repeat, extras.zero_rows, extras.seq,
                                         extras.checksum);
  builder.FinishSizePrefixed(offset);
  out->resize(builder.GetSize());
  std::memcpy(out->data(), builder.GetBufferPointer(), builder.GetSize());
}

Status decode_actor_message(std::span<const std::byte> message, ActorMsg* msg, std::span<const std::byte>* body,
                            WireExtras* extras) {
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
  if (extras) *extras = WireExtras{m->zero_rows(), m->seq(), m->checksum()};
  return {};
}

namespace {

constexpr size_t kMinZeroRowBytes = 16;

bool all_zero(const std::byte* row, size_t bytes) {
  size_t i = 0;
  for (; i + sizeof(uint64_t) <= bytes; i += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, row + i, sizeof word);
    if (word != 0) return false;
  }
  for (; i < bytes; ++i)
    if (row[i] != std::byte{0}) return false;
  return true;
}

}  // namespace

bool mark_zero_rows(std::span<const std::byte> slot, int64_t rows, std::vector<uint8_t>* kept) {
  if (rows < 4 || slot.size() % static_cast<size_t>(rows) != 0) return false;
  const size_t row_bytes = slot.size() / static_cast<size_t>(rows);
  if (row_bytes < kMinZeroRowBytes) return false;
  const size_t n = static_cast<size_t>(rows);
  // A dense row stops the scan at its first non-zero word: a slot that is
  // not worth it costs about one word per row.
  kept->assign((n + 7) / 8, 0);
  size_t zero = 0;
  for (size_t r = 0; r < n; ++r) {
    if (all_zero(slot.data() + r * row_bytes, row_bytes)) ++zero;
    else (*kept)[r / 8] |= static_cast<uint8_t>(1u << (r % 8));
  }
  return zero * 4 >= n;
}

void append_kept_rows(std::span<const std::byte> slot, int64_t rows, const std::vector<uint8_t>& kept,
                      std::vector<std::byte>* out) {
  const size_t n = static_cast<size_t>(rows), row_bytes = slot.size() / n, start = out->size();
  size_t count = 0;
  for (size_t r = 0; r < n; ++r) count += (kept[r / 8] >> (r % 8)) & 1u;
  out->reserve(start + kept.size() + slot.size());
  out->resize(start + kept.size() + count * row_bytes);
  std::byte* at = out->data() + start;
  std::memcpy(at, kept.data(), kept.size());
  at += kept.size();
  for (size_t r = 0; r < n; ++r)
    if ((kept[r / 8] >> (r % 8)) & 1u) {
      std::memcpy(at, slot.data() + r * row_bytes, row_bytes);
      at += row_bytes;
    }
}

int64_t zero_row_rows(std::span<const int64_t> shape) {
  if (shape.size() < 2) return 0;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  return rows;
}

Status expand_zero_rows(std::span<const std::byte> encoded, int64_t rows, std::span<std::byte> slot) {
  if (rows < 1 || slot.size() % static_cast<size_t>(rows) != 0)
    return data_loss("zero-row body for a slot of {} bytes in {} rows", slot.size(), rows);
  const size_t n = static_cast<size_t>(rows), row_bytes = slot.size() / n, bitmap = (n + 7) / 8;
  if (encoded.size() < bitmap) return data_loss("zero-row body of {} bytes, shorter than its bitmap ({})", encoded.size(), bitmap);
  size_t kept = 0;
  for (size_t r = 0; r < n; ++r) kept += (std::to_integer<uint8_t>(encoded[r / 8]) >> (r % 8)) & 1u;
  for (size_t r = n; r < bitmap * 8; ++r)
    if ((std::to_integer<uint8_t>(encoded[r / 8]) >> (r % 8)) & 1u)
      return data_loss("zero-row bitmap marks row {} of a slot of {} rows", r, n);
  if (encoded.size() != bitmap + kept * row_bytes)
    return data_loss("zero-row body of {} bytes; its bitmap marks {} rows of {} bytes (+ {} bitmap bytes)",
                     encoded.size(), kept, row_bytes, bitmap);
  const std::byte* from = encoded.data() + bitmap;
  for (size_t r = 0; r < n; ++r) {
    std::byte* to = slot.data() + r * row_bytes;
    if ((std::to_integer<uint8_t>(encoded[r / 8]) >> (r % 8)) & 1u) {
      std::memcpy(to, from, row_bytes);
      from += row_bytes;
    } else {
      std::memset(to, 0, row_bytes);
    }
  }
  return {};
}

}  // namespace rill
