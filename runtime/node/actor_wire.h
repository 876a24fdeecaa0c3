// Encoding of actor messages for the data plane between nodes (FlatBuffers,
// runtime/node/actor_message.fbs). Pure functions; any thread.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "actor/message.h"
#include "base/status.h"

namespace rill {

// What a message carries besides the ActorMsg (actor_message.fbs).
struct WireExtras {
  bool zero_rows = false;  // the body that follows is a zero-row encoding (below)
  uint64_t seq = 0;        // its number on its link (from 1)
  uint64_t checksum = 0;   // XXH3-64 of the slot's bytes (a ready with a body)
};
// Writes `msg` as a size-prefixed ActorMessage into `out` (reused, so steady
// state does not allocate once it has grown).
void encode_actor_message(const ActorMsg& msg, std::vector<std::byte>* out, const WireExtras& extras = {});
// Verifies and reads a message; `body` is what follows the header.
Status decode_actor_message(std::span<const std::byte> message, ActorMsg* msg, std::span<const std::byte>* body,
                            WireExtras* extras = nullptr);

// Zero rows left out: a slot of `rows` equal rows, most of them all zero
// bytes (a lookup-table block's rows for the ids other blocks hold), crosses
// as a bitmap of the rows that are not (bit r of byte r / 8), then those
// rows. Worth it where at least a quarter of the rows are zero and a row
// is 16 bytes or more; a slot that is not stays one zero-copy body.
//
// In two steps, so that the rows go straight after a header made once it
// is known whether they are left out: mark_zero_rows marks in `kept` the
// rows that are not all zero bytes and returns whether leaving the others
// out is worth it; append_kept_rows then appends the bitmap and the rows it
// marks to `out`, reserving room for the whole slot, so that a later step
// with fewer zero rows does not grow it.
bool mark_zero_rows(std::span<const std::byte> slot, int64_t rows, std::vector<uint8_t>* kept);
void append_kept_rows(std::span<const std::byte> slot, int64_t rows, const std::vector<uint8_t>& kept,
                      std::vector<std::byte>* out);
// The rows a slot of `shape` is read as: its innermost dimension's rows
// (an embedding lookup's [batch, ids, dim] is batch x ids rows of dim);
// 0 for scalars and vectors, which always cross whole.
int64_t zero_row_rows(std::span<const int64_t> shape);
// Writes the slot that `encoded` describes into `slot` (`rows` rows).
// Errors: a bitmap or a row count that does not fit the slot.
Status expand_zero_rows(std::span<const std::byte> encoded, int64_t rows, std::span<std::byte> slot);

}  // namespace rill
