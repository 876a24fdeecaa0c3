// The ZeroMQ data plane's frames: the clear part that begins each TCP
// frame, plain or sealed (comm/data_cipher.h). Internal to the transport.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/data_cipher.h"

namespace rill::comm::zmq_internal {

constexpr uint32_t kMagic = 0x5441444c;        // "LDAT" little-endian: Rill data plane, version 1
constexpr uint32_t kSealedMagic = 0x5345444c;  // "LDES": the same, sealed (a keyed cluster)
struct FrameMeta {
  uint32_t magic;
  uint32_t from;
  uint64_t tag;
};
static_assert(sizeof(FrameMeta) == 16);
// A sealed frame's clear part (authenticated, not encrypted): the meta, the
// link's message counter and the tag of the whole message (first frame
// after this, then the second frame). 40 bytes: what follows stays 8-byte
// aligned.
struct SealedMeta {
  FrameMeta meta;
  uint64_t counter;
  uint8_t tag[kSealTagBytes];
};
static_assert(sizeof(SealedMeta) == 40);
// What the tag covers in the clear: the meta and the counter.
constexpr size_t kSealedClearBytes = offsetof(SealedMeta, tag);

}  // namespace rill::comm::zmq_internal
