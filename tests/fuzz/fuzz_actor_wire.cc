// The actor wire header (runtime/node/actor_wire.h): every actor message a
// node receives from another, and a zero-row body it expands.
#include <array>

#include "runtime/node/actor_wire.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rill::ActorMsg msg;
  std::span<const std::byte> body;
  rill::WireExtras extras;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (!rill::decode_actor_message(bytes, &msg, &body, &extras).ok()) return 0;
  if (extras.zero_rows) {
    static std::array<std::byte, 4096> slot;
    for (int64_t rows : {1, 4, 16, 64}) (void)rill::expand_zero_rows(body, rows, slot);
  }
  return 0;
}

std::vector<std::string> rill_fuzz_seeds() {
  std::vector<std::string> seeds;
  std::vector<std::byte> out;
  rill::ActorMsg msg;
  msg.src = 5;
  msg.dst = (uint64_t{1} << 40) | 7;
  msg.slot = 1;
  msg.regst = 12;
  msg.step = 3;
  for (bool zero_rows : {false, true}) {
    rill::encode_actor_message(msg, &out, {zero_rows, 9, 0x1234});
    std::string seed(reinterpret_cast<const char*>(out.data()), out.size());
    if (zero_rows) seed += std::string("\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 16);
    seeds.push_back(std::move(seed));
  }
  return seeds;
}
