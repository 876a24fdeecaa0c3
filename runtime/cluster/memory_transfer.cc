#include "runtime/cluster/memory_transfer.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace rill {
namespace {

size_t chunks_of(size_t bytes) { return (bytes + kMemoryChunkBytes - 1) / kMemoryChunkBytes; }

Status send_count(comm::Transport& transport, int to, uint64_t tag, uint64_t count) {
  std::byte header[sizeof count];
  std::memcpy(header, &count, sizeof count);
  return transport.send(to, tag, header);
}

// An ack (or the ready, 0): how many chunks the receiver holds.
StatusOr<uint64_t> receive_count(comm::Transport& transport, int from, uint64_t tag, comm::Clock::time_point deadline,
                                 std::vector<std::byte>* buffer) {
  RILL_RETURN_IF_ERROR(transport.recv(from, tag, buffer, deadline));
  if (buffer->size() != sizeof(uint64_t))
    return data_loss("an acknowledgement of {} bytes, not {}", buffer->size(), sizeof(uint64_t));
  uint64_t count = 0;
  std::memcpy(&count, buffer->data(), sizeof count);
  return count;
}

// `bytes` in chunks, a window at a time, each window acknowledged.
Status send_chunks(comm::Transport& transport, int to, StreamTags tags, std::string_view bytes,
                   std::chrono::milliseconds patience, const std::string& what) {
  std::vector<std::byte> reply, chunk;
  const size_t chunks = chunks_of(bytes.size());
  for (size_t first = 0; first < chunks; first += kMemoryWindow) {
    const size_t end = std::min(chunks, first + kMemoryWindow);
    for (size_t i = first; i < end; ++i) {
      // Its index, then its bytes, in the header (which the transport
      // copies): nothing of `bytes` is read after an error returns.
      const std::string_view part = bytes.substr(i * kMemoryChunkBytes, kMemoryChunkBytes);
      const uint64_t index = i;
      chunk.resize(sizeof index + part.size());
      std::memcpy(chunk.data(), &index, sizeof index);
      std::memcpy(chunk.data() + sizeof index, part.data(), part.size());
      RILL_RETURN_IF_ERROR(transport.send(to, tags.chunk, chunk).with_context(what));
    }
    auto acked = receive_count(transport, to, tags.ack, comm::Clock::now() + patience, &reply);
    if (!acked.ok()) return acked.status().with_context(fmt::format("{}: waiting for chunk {}'s ack", what, end));
    if (*acked != end) return data_loss("{}: it acknowledged {} chunks, not {}", what, *acked, end);
  }
  return {};
}

// Exactly `bytes` bytes in chunks from `from`, acknowledging each window.
StatusOr<std::string> receive_chunks(comm::Transport& transport, int from, StreamTags tags, size_t bytes,
                                     std::chrono::milliseconds patience, const std::string& what) {
  std::string out(bytes, '\0');
  const size_t chunks = chunks_of(bytes);
  comm::Received message;
  std::vector<std::byte> flat;
  for (size_t i = 0; i < chunks; ++i) {
    RILL_RETURN_IF_ERROR(transport.recv_message(from, tags.chunk, comm::Clock::now() + patience, &message)
                             .with_context(fmt::format("{}: chunk {} of {}", what, i, chunks)));
    const size_t expected = std::min(kMemoryChunkBytes, bytes - i * kMemoryChunkBytes);
    flat.resize(message.size());
    message.view().copy_to(flat.data());
    uint64_t index = 0;
    if (flat.size() >= sizeof index) std::memcpy(&index, flat.data(), sizeof index);
    if (flat.size() != sizeof index + expected || index != i)
      return data_loss("{}: chunk {} came as {} bytes numbered {}, not {} bytes", what, i, flat.size(), index,
                       sizeof index + expected);
    std::memcpy(out.data() + i * kMemoryChunkBytes, flat.data() + sizeof index, expected);
    message.reset();
    if ((i + 1) % kMemoryWindow == 0 || i + 1 == chunks)
      RILL_RETURN_IF_ERROR(send_count(transport, from, tags.ack, i + 1).with_context(what));
  }
  return out;
}

constexpr StreamTags memory_tags(uint64_t tag_base) {
  return StreamTags{tag_base + kMemoryChunkTag, tag_base + kMemoryAckTag};
}

}  // namespace

Status send_memory(comm::Transport& transport, int to, uint64_t tag_base, std::string_view bytes,
                   std::chrono::milliseconds patience) {
  const std::string what = fmt::format("node 0's memory ({} bytes) to rank {}", bytes.size(), to);
  std::vector<std::byte> reply;
  auto ready = receive_count(transport, to, tag_base + kMemoryAckTag, comm::Clock::now() + patience, &reply);
  if (!ready.ok()) return ready.status().with_context(what + ": waiting for it to be ready");
  if (*ready != 0) return data_loss("{}: it said it was ready holding {} chunks", what, *ready);
  return send_chunks(transport, to, memory_tags(tag_base), bytes, patience, what);
}

StatusOr<std::string> receive_memory(comm::Transport& transport, uint64_t tag_base, size_t bytes,
                                     std::chrono::milliseconds patience) {
  const std::string what = fmt::format("node 0's memory ({} bytes)", bytes);
  // The phase's tags from now on, and no bound of an earlier run's plan on
  // a message's size or on what waits unread beyond a window of chunks:
  // the run built next sets its own.
  transport.accept_tags(tag_base, tag_base + kTagsPerRun);
  transport.limit_message_bytes(0);
  transport.limit_unread_bytes(2 * kMemoryWindow * (kMemoryChunkBytes + 4096));
  RILL_RETURN_IF_ERROR(send_count(transport, 0, tag_base + kMemoryAckTag, 0).with_context(what + ": saying ready"));
  return receive_chunks(transport, 0, memory_tags(tag_base), bytes, patience, what);
}

Status send_stream_message(comm::Transport& transport, int to, StreamTags tags, const StreamHeader& header,
                           std::string_view bytes, std::chrono::milliseconds patience) {
  const std::string what = fmt::format("the pieces after step {} ({} of {}, {} bytes) to rank {}", header.step,
                                       header.index + 1, header.count, bytes.size(), to);
  if (header.bytes != bytes.size()) return internal_error("{}: its header says {} bytes", what, header.bytes);
  uint64_t words[4] = {static_cast<uint64_t>(header.step), header.index, header.count, header.bytes};
  RILL_RETURN_IF_ERROR(transport.send(to, tags.chunk, std::as_bytes(std::span(words))).with_context(what));
  return send_chunks(transport, to, tags, bytes, patience, what);
}

Status send_stream(comm::Transport& transport, int to, StreamTags tags, int64_t step,
                   const std::vector<std::string>& messages, std::chrono::milliseconds patience) {
  const uint64_t count = messages.size();
  if (count == 0) return send_stream_message(transport, to, tags, StreamHeader{step, 0, 0, 0}, {}, patience);
  for (uint64_t i = 0; i < count; ++i)
    RILL_RETURN_IF_ERROR(send_stream_message(transport, to, tags, StreamHeader{step, i, count, messages[i].size()},
                                             messages[i], patience));
  return {};
}

StatusOr<StreamHeader> receive_stream_header(comm::Transport& transport, int from, StreamTags tags,
                                             comm::Clock::time_point deadline, size_t max_bytes) {
  std::vector<std::byte> buffer;
  RILL_RETURN_IF_ERROR(transport.recv(from, tags.chunk, &buffer, deadline));
  uint64_t words[4];
  if (buffer.size() != sizeof words)
    return data_loss("a stream's header from rank {} came as {} bytes, not {}", from, buffer.size(), sizeof words);
  std::memcpy(words, buffer.data(), sizeof words);
  StreamHeader header{static_cast<int64_t>(words[0]), words[1], words[2], words[3]};
  if (header.step < 0 || header.bytes > max_bytes || header.count > kMostStreamMessages ||
      (header.count > 0 && (header.index >= header.count || header.bytes == 0)) ||
      (header.count == 0 && header.bytes != 0))
    return data_loss("a stream's header from rank {} is malformed: step {}, message {} of {}, {} bytes (at most {})",
                     from, header.step, header.index, header.count, header.bytes, max_bytes);
  return header;
}

StatusOr<std::string> receive_stream_body(comm::Transport& transport, int from, StreamTags tags,
                                          const StreamHeader& header, std::chrono::milliseconds patience) {
  const std::string what = fmt::format("the pieces after step {} ({} of {}, {} bytes) from rank {}", header.step,
                                       header.index + 1, header.count, header.bytes, from);
  return receive_chunks(transport, from, tags, header.bytes, patience, what);
}

}  // namespace rill
