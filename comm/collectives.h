// Collectives: the collective operations among all ranks of a Transport
// (ZeroMQ or in-process), on the CPU: all_reduce, reduce_scatter, reduce
// (f32 and i32: sum, max, min, product, or for f32 average; i32 sums and
// products wrap around), all_gather, broadcast,
// gather, scatter, all_to_all (bytes),
// barrier, and point-to-point send/recv; reduce_scatter, all_gather and
// all_to_all also with a block size per rank (the _v forms, as MPI's), which
// boxing uses for uneven splits and for pieces packed by rank.
//
// Every rank calls the same operation with the same tag and sizes. Distinct
// operations that may run at the same time must use distinct tags; calls
// with one tag run in the same order on every rank. Each call has a deadline
// (options.timeout from its start); errors name the operation, peer and tag.
//
// Set up once, run many times: scratch is kept between calls, so repeated
// calls of the same size allocate nothing here (the transport's own receive
// buffers are its business). Or the caller gives the scratch once
// (use_scratch), sized by base/collective_scratch.h: then nothing here
// allocates it (boxing draws it from the node's memory plan). Buffers are
// sent without a copy; every call returns only once the transport no
// longer reads them. After an error the
// object refuses further calls (the ranks no longer agree on what was sent),
// and the buffers of the failed call must stay alive until the transport is
// closed.
//
// Threads: one call at a time per object. Objects over the same transport
// may run concurrently from different threads with distinct tags.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/collective_scratch.h"
#include "base/half.h"
#include "comm/liveness.h"
#include "comm/transport.h"

namespace rill::comm {

class FlightRecord;  // comm/flight_record.h

// How all_reduce, reduce_scatter and reduce combine the ranks' values.
// Average is the sum divided by the world size once, at the end. Max and min
// propagate NaN. Every rank combines a block in the same order, so all get
// the same bits.
enum class ReduceOp : uint8_t { kSum, kMax, kMin, kProduct, kAverage };
const char* reduce_op_name(ReduceOp op);
// dst[i] = a[i] op b[i] for n elements (the average's sum: the division is
// the caller's); b may be unaligned, dst may be a. Boxing's partial sums
// combine with it too.
void combine_into(ReduceOp op, float* dst, const float* a, const std::byte* b, size_t n);
void combine_into(ReduceOp op, int32_t* dst, const int32_t* a, const std::byte* b, size_t n);
void combine_into(ReduceOp op, BFloat16* dst, const BFloat16* a, const std::byte* b, size_t n);
void combine_into(ReduceOp op, Float16* dst, const Float16* a, const std::byte* b, size_t n);

struct CollectiveOptions {
  size_t chunk_bytes = size_t{1} << 20;          // ring and chain steps pipeline in chunks of this size
  std::chrono::milliseconds timeout{60000};      // each call's deadline, counted from its start
  size_t direct_bytes = kCollectiveDirectBytes;  // all_reduce of at most this many bytes: one exchange
                                                 // among all ranks (one hop) instead of the ring
  // Where each call, and the rank it waits for, is recorded (the node's
  // flight record), as caller `caller` of it; null: nowhere.
  FlightRecord* record = nullptr;
  int caller = -1;
  // The machine of each rank (by rank; empty: not known). Where there are
  // several machines, each with the same number of ranks, more than one, an
  // all_reduce above direct_bytes goes within each machine first
  // (collective_tiers.cc): a reduce-scatter among its ranks, the all-reduce
  // of each rank's block among the ranks of that index on every machine,
  // then an all-gather within the machine. Each machine sends its tensor
  // across once, not once per rank on the ring's boundary. Not with
  // use_scratch (the flat ring then).
  std::vector<int> machines;
  // Grows while the ranks it waits for are busy elsewhere and alive (a
  // node writing its checkpoint): a wait past the deadline during which it
  // changed waits on for another `timeout`. Null: the deadline is final.
  Liveness liveness;
};

// The block of a `count`-element tensor that rank `index` of `world` owns in
// reduce_scatter (and all_reduce's ring): blocks are contiguous, in rank
// order, and differ in size by at most one element.
struct BlockRange {
  size_t begin = 0;
  size_t size = 0;
};
BlockRange block_range(size_t count, int world, int index);

class Collectives {
 public:
  explicit Collectives(Transport& transport, CollectiveOptions options = {});
  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  int rank() const { return transport_.rank(); }
  int world() const { return transport_.world(); }
  const CollectiveOptions& options() const { return options_; }
  // The last call's operation and algorithm ("all_reduce", "ring"): "direct"
  // (every rank sends to every other, one hop), "recursive doubling" (a
  // small all-reduce among more than kCollectiveDirectMaxRanks ranks), "ring",
  // "machines first" (options.machines), "pipelined chain",
  // "pairwise", "dissemination", "point-to-point", or "local" in a world of
  // one. Empty strings before the first call.
  const char* last_op() const { return last_op_; }
  const char* last_algorithm() const { return last_algorithm_; }
  // Bytes of scratch held (grows to the largest reduce_scatter/reduce seen;
  // with use_scratch, the given span's size), and a joined message's room.
  size_t scratch_bytes() const { return (given_ ? scratch_.size() : work_.capacity()) + joined_.capacity(); }
  // From now on every call takes its scratch from `scratch` (which must
  // outlive this object's calls and, after a failed call, the transport's
  // reads) and allocates none for it; a call that needs more than
  // collective_scratch_bytes fails (an internal error naming the need). A
  // message a transport hands over in two pieces with data in both is
  // still joined in a buffer of the object's own; no transport here does
  // (ZeroMQ's header and body frames arrive apart, or a small message whole).
  void use_scratch(std::span<std::byte> scratch) {
    scratch_ = scratch;
    given_ = true;
  }

  // out = sum over ranks of in, the same bits on every rank. `in` and `out`
  // are the same size and either the same span (in place) or disjoint. Ring
  // (reduce-scatter, all-gather), or for small tensors a direct exchange
  // (up to kCollectiveDirectMaxRanks ranks) or recursive doubling.
  // `op` other than the sum: the same with that combination.
  // Each reduction takes f32, i32, bf16 or f16 elements (16-bit floats
  // combine in float, rounding once a step).
  Status all_reduce(std::span<const float> in, std::span<float> out, uint64_t tag, ReduceOp op = ReduceOp::kSum);
  Status all_reduce(std::span<const int32_t> in, std::span<int32_t> out, uint64_t tag, ReduceOp op = ReduceOp::kSum);
  // out = this rank's block (block_range) of the sum over ranks of in.
  Status reduce_scatter(std::span<const float> in, std::span<float> out, uint64_t tag, ReduceOp op = ReduceOp::kSum);
  Status reduce_scatter(std::span<const int32_t> in, std::span<int32_t> out, uint64_t tag,
                        ReduceOp op = ReduceOp::kSum);
  // The same with rank j's block counts[j] elements long (blocks contiguous in
  // rank order, summing to in.size()); out.size() == counts[rank].
  Status reduce_scatter_v(std::span<const float> in, std::span<float> out, std::span<const size_t> counts,
                          uint64_t tag, ReduceOp op = ReduceOp::kSum);
  Status reduce_scatter_v(std::span<const int32_t> in, std::span<int32_t> out, std::span<const size_t> counts,
                          uint64_t tag, ReduceOp op = ReduceOp::kSum);
  // out (root only; same size as in) = sum over ranks of in. Chain ending at root.
  Status reduce(std::span<const float> in, std::span<float> out, int root, uint64_t tag,
                ReduceOp op = ReduceOp::kSum);
  Status reduce(std::span<const int32_t> in, std::span<int32_t> out, int root, uint64_t tag,
                ReduceOp op = ReduceOp::kSum);
  Status all_reduce(std::span<const BFloat16> in, std::span<BFloat16> out, uint64_t tag, ReduceOp op = ReduceOp::kSum);
  Status all_reduce(std::span<const Float16> in, std::span<Float16> out, uint64_t tag, ReduceOp op = ReduceOp::kSum);
  Status reduce_scatter(std::span<const BFloat16> in, std::span<BFloat16> out, uint64_t tag,
                        ReduceOp op = ReduceOp::kSum);
  Status reduce_scatter(std::span<const Float16> in, std::span<Float16> out, uint64_t tag,
                        ReduceOp op = ReduceOp::kSum);
  Status reduce_scatter_v(std::span<const BFloat16> in, std::span<BFloat16> out, std::span<const size_t> counts,
                          uint64_t tag, ReduceOp op = ReduceOp::kSum);
  Status reduce_scatter_v(std::span<const Float16> in, std::span<Float16> out, std::span<const size_t> counts,
                          uint64_t tag, ReduceOp op = ReduceOp::kSum);
  Status reduce(std::span<const BFloat16> in, std::span<BFloat16> out, int root, uint64_t tag,
                ReduceOp op = ReduceOp::kSum);
  Status reduce(std::span<const Float16> in, std::span<Float16> out, int root, uint64_t tag,
                ReduceOp op = ReduceOp::kSum);
  // out = the ranks' `in` blocks in rank order (out.size() == world * in.size()).
  // `in` may be this rank's block of out.
  Status all_gather(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag);
  // The same with rank j's block counts[j] bytes long; in.size() ==
  // counts[rank], out.size() the sum of counts.
  Status all_gather_v(std::span<const std::byte> in, std::span<std::byte> out, std::span<const size_t> counts,
                      uint64_t tag);
  // Every rank's buffer = root's buffer. Pipelined chain from root.
  Status broadcast(std::span<std::byte> buffer, int root, uint64_t tag);
  // Root's out = every rank's in, in rank order (out.size() == world * in.size()).
  Status gather(std::span<const std::byte> in, std::span<std::byte> out, int root, uint64_t tag);
  // out = block `rank` of root's in (in.size() == world * out.size() at root).
  Status scatter(std::span<const std::byte> in, std::span<std::byte> out, int root, uint64_t tag);
  // Block j of in goes to rank j, arriving as block `rank` of its out. in and
  // out are disjoint, equal in size, a multiple of world.
  Status all_to_all(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag);
  // The same with blocks of any size: in holds send_counts[j] bytes for rank
  // j, in rank order; out receives recv_counts[j] bytes from rank j, in rank
  // order. Each rank's recv_counts[j] must equal rank j's send_counts[rank].
  Status all_to_all_v(std::span<const std::byte> in, std::span<const size_t> send_counts, std::span<std::byte> out,
                      std::span<const size_t> recv_counts, uint64_t tag);
  // Returns once every rank has entered (dissemination, log2(world) rounds).
  Status barrier(uint64_t tag);
  // Point to point; send returns once `data` may be reused, recv expects
  // exactly data.size() bytes.
  Status send(int to, std::span<const std::byte> data, uint64_t tag);
  Status recv(int from, std::span<std::byte> data, uint64_t tag);
  // Bodies handed to the transport that it still reads (a failed call may
  // leave some, reading the caller's buffers).
  // (Those of the machines-first all-reduce's steps included: they send
  // from this object's scratch.)
  int64_t sends_in_flight() const;
  Status wait_sends(Clock::time_point deadline) const;

 private:
  Status begin(const char* op, uint64_t tag);
  // Scratch for this call's partial sums or own copy: `count` elements of T
  // (the given scratch's start, or the object's own, grown as needed).
  template <typename T>
  StatusOr<T*> work(size_t count, const char* op, uint64_t tag);
  Status end(const char* op, const char* algorithm, uint64_t tag, Status status);
  Status send_chunks(int to, std::span<const std::byte> bytes, size_t chunk, uint64_t tag);
  // Every message of a collective: a ChunkHeader (its number among this
  // op's messages to that rank, its length, the XXH3-64 of its bytes), then
  // the bytes. A message that comes out of turn (lost, repeated, swapped) or
  // corrupted is a data-loss error naming the link, never data.
  Status send_chunk(int to, std::span<const std::byte> bytes, uint64_t tag);
  // Receives the next message from `from`, which must hold `bytes` bytes;
  // the returned bytes live until the next call (possibly unaligned).
  StatusOr<const std::byte*> recv_chunk(int from, size_t bytes, uint64_t tag);
  template <typename T>
  size_t chunk_elements() const;
  int peer(int offset) const;  // (rank + offset) mod world

  // blocks_ = rank j's block of a `count`-element tensor, equal or by counts.
  void set_blocks(size_t count);
  Status set_blocks(std::span<const size_t> counts, size_t total, const char* op, uint64_t tag);
  // The reductions, for each element type (collectives.cc).
  template <typename T>
  Status all_reduce_t(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op);
  template <typename T>
  Status reduce_scatter_t(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op);
  template <typename T>
  Status reduce_scatter_v_t(std::span<const T> in, std::span<T> out, std::span<const size_t> counts, uint64_t tag,
                            ReduceOp op);
  template <typename T>
  Status reduce_t(std::span<const T> in, std::span<T> out, int root, uint64_t tag, ReduceOp op);
  template <typename T>
  Status all_reduce_ring(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op);
  template <typename T>
  Status all_reduce_direct(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op);
  template <typename T>
  Status all_reduce_doubling(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op);
  // options.machines: the all-reduce within each machine first (collective_tiers.cc).
  struct Tiers;
  Tiers* tiers();  // null: the ranks are not on several machines alike
  template <typename T>
  Status all_reduce_tiered(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op);
  template <typename T>
  Status reduce_scatter_ring(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op);
  template <typename T>
  Status reduce_chain(std::span<const T> in, std::span<T> out, int root, uint64_t tag, ReduceOp op);
  // The average's division, once the sum is complete.
  template <typename T>
  void finish(ReduceOp op, std::span<T> out) const;
  Status all_gather_ring(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag);
  Status all_to_all_blocks(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag);
  Status broadcast_chain(std::span<std::byte> buffer, int root, uint64_t tag);

  Transport& transport_;
  const CollectiveOptions options_;
  SendTracker tracker_;
  Received received_;              // the message being consumed
  // Partial sums of reduce_scatter and reduce, or a small in-place
  // all_reduce's input (sent while out changes), unless given; a message
  // that arrived in two pieces.
  std::vector<std::byte> work_, joined_;
  std::span<std::byte> scratch_;  // given by use_scratch (base/collective_scratch.h), used for work_
  bool given_ = false;
  std::vector<BlockRange> blocks_;       // the current ring's block per rank (elements or bytes)
  std::vector<BlockRange> recv_blocks_;  // all_to_all: the block received from each rank
  Clock::time_point deadline_;
  LivenessWatch liveness_{options_.liveness};  // since deadline_ was set
  // Runs `wait` (a wait until deadline_) again, the deadline moved on by
  // the timeout, each time it ends at the deadline with options_.liveness
  // moved since that deadline was set.
  template <typename Wait>
  Status patiently(Wait wait) {
    for (;;) {
      Status status = wait();
      if (status.code() != Code::kDeadlineExceeded || !liveness_.moved()) return status;
      deadline_ = Clock::now() + options_.timeout;
    }
  }
  std::vector<uint32_t> sent_;      // per rank: messages sent to it in this op
  std::vector<uint32_t> received_from_;  // per rank: messages received from it in this op
  bool failed_ = false;
  // A step of an outer object's call (Tiers): that call's deadline, not one of its own.
  std::optional<Clock::time_point> outer_deadline_;
  std::unique_ptr<Tiers> tiers_;  // made by the first call that uses them
  bool tiers_checked_ = false;
  const char* last_op_ = "";
  const char* last_algorithm_ = "";
};

}  // namespace rill::comm
