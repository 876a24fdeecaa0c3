// Node 0's memory to a node that comes back, over the data plane
// (runtime/cluster/memory_transfer.h): every byte in order, in windows of
// acknowledged chunks, whatever the size; a receiver that is gone, or
// bytes that do not add up, are errors naming what was being sent.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "comm/transport.h"
#include "runtime/cluster/memory_transfer.h"

namespace rill {
namespace {

using std::chrono::milliseconds;

std::string pattern(size_t bytes) {
  std::string out(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>((i * 2654435761u) >> 13);
  return out;
}

TEST_CASE("node 0's memory reaches a newcomer whole, at every size around a chunk and a window") {
  const uint64_t tag_base = uint64_t{7} << 20;
  for (size_t bytes : {size_t{1}, kMemoryChunkBytes - 1, kMemoryChunkBytes, kMemoryChunkBytes + 1,
                       kMemoryWindow * kMemoryChunkBytes, kMemoryWindow * kMemoryChunkBytes + 3,
                       2 * kMemoryWindow * kMemoryChunkBytes + kMemoryChunkBytes / 2}) {
    CAPTURE(bytes);
    auto transports = comm::make_inproc_transports(2);
    const std::string memory = pattern(bytes);
    Status sent;
    std::thread sender([&] { sent = send_memory(*transports[0], 1, tag_base, memory, milliseconds(10000)); });
    auto received = receive_memory(*transports[1], tag_base, bytes, milliseconds(10000));
    sender.join();
    CHECK_MESSAGE(sent.ok(), sent.to_string());
    REQUIRE_MESSAGE(received.ok(), received.status().to_string());
    CHECK(*received == memory);
  }
}

TEST_CASE("a newcomer that never says it is ready, or is gone, is named by node 0 within its patience") {
  auto transports = comm::make_inproc_transports(2);
  const std::string memory = pattern(3 * kMemoryChunkBytes);
  const auto start = std::chrono::steady_clock::now();
  Status sent = send_memory(*transports[0], 1, uint64_t{1} << 20, memory, milliseconds(200));
  CHECK(sent.code() == Code::kDeadlineExceeded);
  CHECK(sent.message().find("node 0's memory (3145728 bytes) to rank 1: waiting for it to be ready") !=
        std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  // Gone before it said ready: node 0 is not kept waiting past its patience.
  transports[1]->close();
  Status after_close = send_memory(*transports[0], 1, uint64_t{2} << 20, memory, milliseconds(200));
  CHECK_FALSE(after_close.ok());
}

TEST_CASE("a newcomer told another size than node 0 sends says so") {
  auto transports = comm::make_inproc_transports(2);
  const uint64_t tag_base = uint64_t{3} << 20;
  const std::string memory = pattern(kMemoryChunkBytes + 10);
  std::thread sender([&] { (void)send_memory(*transports[0], 1, tag_base, memory, milliseconds(2000)); });
  auto received = receive_memory(*transports[1], tag_base, kMemoryChunkBytes + 11, milliseconds(2000));
  sender.join();
  REQUIRE_FALSE(received.ok());
  CHECK(received.status().code() == Code::kDataLoss);
  CHECK(received.status().message().find("chunk 1 came as 18 bytes numbered 1, not 19 bytes") != std::string::npos);
}

}  // namespace
}  // namespace rill
