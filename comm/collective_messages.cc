// How each message of a collective travels: numbered per op and peer, and
// checksummed (or sealed by the link), so a lost, repeated, swapped or
// corrupted message is a data-loss error naming the link, never data; and
// what a receive waits for, told to the flight record.
#include <algorithm>
#include <cstring>

#include <xxhash.h>

#include "comm/collectives.h"
#include "comm/flight_record.h"

namespace rill::comm {

Status Collectives::send_chunks(int to, std::span<const std::byte> bytes, size_t chunk, uint64_t tag) {
  for (size_t offset = 0; offset < bytes.size(); offset += chunk)
    RILL_RETURN_IF_ERROR(send_chunk(to, bytes.subspan(offset, std::min(chunk, bytes.size() - offset)), tag));
  return Status::ok_status();
}

namespace {

struct ChunkHeader {
  uint32_t index;   // among this op's messages from the sender to the receiver; kSealedLink set: no checksum
  uint32_t length;  // bytes that follow (low 32 bits)
  uint64_t checksum;  // XXH3-64 of them
};
static_assert(sizeof(ChunkHeader) == 16);
// A chunk sent over a sealed link (Transport::seals) carries no checksum:
// the link's tag checks it. A receiver takes that only from a message that
// came sealed.
constexpr uint32_t kSealedLink = 1u << 31;

}  // namespace

Status Collectives::send_chunk(int to, std::span<const std::byte> bytes, uint64_t tag) {
  const bool sealed = transport_.seals(to);
  const uint32_t index = sent_[static_cast<size_t>(to)]++ & ~kSealedLink;
  const ChunkHeader header{sealed ? index | kSealedLink : index, static_cast<uint32_t>(bytes.size()),
                           sealed ? 0 : XXH3_64bits(bytes.data(), bytes.size())};
  return transport_.send(to, tag, std::as_bytes(std::span<const ChunkHeader>(&header, 1)), bytes, &tracker_);
}

StatusOr<const std::byte*> Collectives::recv_chunk(int from, size_t bytes, uint64_t tag) {
  received_.reset();
  if (options_.record) options_.record->wait_for(options_.caller, from);
  RILL_RETURN_IF_ERROR(patiently([&] { return transport_.recv_message(from, tag, deadline_, &received_); }));
  if (options_.record) options_.record->wait_for(options_.caller, -1);
  const MessageView& view = received_.view();
  constexpr size_t kHeader = sizeof(ChunkHeader);
  if (view.first.size() < kHeader) {
    return data_loss("message from rank {} with {} has {} bytes, shorter than the {}-byte header of a collective's",
                     from, describe_tag(tag), view.size(), kHeader);
  }
  if (view.size() != kHeader + bytes) {
    return data_loss("message from rank {} with {} has {} bytes, expected {}", from, describe_tag(tag),
                     view.size() - kHeader, bytes);
  }
  ChunkHeader header;
  std::memcpy(&header, view.first.data(), kHeader);
  const std::byte* data = nullptr;
  if (view.second.empty()) {
    data = view.first.data() + kHeader;
  } else if (view.first.size() == kHeader) {
    data = view.second.data();
  } else {
    joined_.resize(bytes);
    const size_t head = view.first.size() - kHeader;
    std::memcpy(joined_.data(), view.first.data() + kHeader, head);
    std::memcpy(joined_.data() + head, view.second.data(), view.second.size());
    data = joined_.data();
  }
  const bool unchecked = (header.index & kSealedLink) != 0;
  const uint32_t index = header.index & ~kSealedLink;
  uint32_t& due = received_from_[static_cast<size_t>(from)];
  if (index != due) {
    return data_loss("the link from rank {} to rank {} ({}): message {} came where {} was due ({})", from, rank(),
                     describe_tag(tag), index, due,
                     index > due ? "a message was lost" : "a message came twice or out of order");
  }
  due = (due + 1) & ~kSealedLink;
  if (unchecked && !view.sealed)
    return data_loss("the link from rank {} to rank {} ({}): message {} came without a checksum, and not sealed",
                     from, rank(), describe_tag(tag), index);
  if (header.length != static_cast<uint32_t>(bytes) || (!unchecked && XXH3_64bits(data, bytes) != header.checksum)) {
    return data_loss("the link from rank {} to rank {} ({}): message {} arrived corrupted", from, rank(),
                     describe_tag(tag), index);
  }
  return data;
}

}  // namespace rill::comm
