#include "comm/collectives.h"
#include "comm/collective_tiers.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <spdlog/spdlog.h>

#include "comm/flight_record.h"

namespace rill::comm {
namespace {

// Sums and products of i32 wrap around (two's complement, as NCCL's and
// PyTorch's integer reductions): computed unsigned, never undefined. 16-bit
// floats combine in float and round once per step (as NCCL's).
template <typename T>
T plus(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) + static_cast<std::make_unsigned_t<T>>(y));
  } else if constexpr (kIsHalf<T>) {
    return T::from_float(x.to_float() + y.to_float());
  } else {
    return x + y;
  }
}
template <typename T>
T times(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) * static_cast<std::make_unsigned_t<T>>(y));
  } else if constexpr (kIsHalf<T>) {
    return T::from_float(x.to_float() * y.to_float());
  } else {
    return x * y;
  }
}
// The value max and min compare: a 16-bit float as float.
template <typename T>
auto compared(T x) {
  if constexpr (kIsHalf<T>)
    return x.to_float();
  else
    return x;
}

// dst[i] = a[i] + b[i]. `b` is a transport buffer and may be unaligned, so it
// is read through memcpy (vectorized into unaligned loads).
template <typename T>
void add_into(T* dst, const T* a, const std::byte* b, size_t n) {
  if (dst == a) {
    T* __restrict d = dst;
    const std::byte* __restrict s = b;
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, s + i * sizeof(T), sizeof v);
      d[i] = plus(d[i], v);
    }
  } else {
    T* __restrict d = dst;
    const T* __restrict x = a;
    const std::byte* __restrict s = b;
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, s + i * sizeof(T), sizeof v);
      d[i] = plus(x[i], v);
    }
  }
}

// dst[i] = f(a[i], b[i]), b read as in add_into.
template <typename T, typename F>
void combine_with(T* dst, const T* a, const std::byte* b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, b + i * sizeof(T), sizeof v);
    dst[i] = f(a[i], v);
  }
}

template <typename T>
void combine_typed(ReduceOp op, T* dst, const T* a, const std::byte* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: add_into(dst, a, b, n); return;
    case ReduceOp::kMax:
      combine_with(dst, a, b, n, [](T x, T y) {
        const auto u = compared(x), v = compared(y);
        return u > v || u != u ? x : y;
      });
      return;
    case ReduceOp::kMin:
      combine_with(dst, a, b, n, [](T x, T y) {
        const auto u = compared(x), v = compared(y);
        return u < v || u != u ? x : y;
      });
      return;
    case ReduceOp::kProduct: combine_with(dst, a, b, n, [](T x, T y) { return times(x, y); }); return;
  }
}

template <typename T>
std::span<const std::byte> bytes_of(const T* data, size_t count) {
  return {reinterpret_cast<const std::byte*>(data), count * sizeof(T)};
}

}  // namespace

void combine_into(ReduceOp op, float* dst, const float* a, const std::byte* b, size_t n) {
  combine_typed(op, dst, a, b, n);
}
void combine_into(ReduceOp op, int32_t* dst, const int32_t* a, const std::byte* b, size_t n) {
  combine_typed(op, dst, a, b, n);
}
void combine_into(ReduceOp op, BFloat16* dst, const BFloat16* a, const std::byte* b, size_t n) {
  combine_typed(op, dst, a, b, n);
}
void combine_into(ReduceOp op, Float16* dst, const Float16* a, const std::byte* b, size_t n) {
  combine_typed(op, dst, a, b, n);
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kAverage: return "average";
  }
  return "?";
}

template <typename T>
void Collectives::finish(ReduceOp op, std::span<T> out) const {
  if constexpr (std::is_floating_point_v<T>) {
    if (op != ReduceOp::kAverage) return;
    const T n = static_cast<T>(world());
    for (T& v : out) v /= n;
  } else if constexpr (kIsHalf<T>) {
    if (op != ReduceOp::kAverage) return;
    const float n = static_cast<float>(world());
    for (T& v : out) v = T::from_float(v.to_float() / n);
  }  // an integer average is refused before it begins
}

BlockRange block_range(size_t count, int world, int index) {
  const size_t n = static_cast<size_t>(world), i = static_cast<size_t>(index);
  const size_t base = count / n, extra = count % n;
  return BlockRange{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

Collectives::Collectives(Transport& transport, CollectiveOptions options) : transport_(transport), options_(options) {}

int64_t Collectives::sends_in_flight() const {
  return tracker_.in_flight() + (tiers_ ? tiers_->machine.sends_in_flight() + tiers_->lane.sends_in_flight() : 0);
}

Status Collectives::wait_sends(Clock::time_point deadline) const {
  RILL_RETURN_IF_ERROR(tracker_.wait(deadline));
  if (!tiers_) return Status::ok_status();
  RILL_RETURN_IF_ERROR(tiers_->machine.wait_sends(deadline));
  return tiers_->lane.wait_sends(deadline);
}

Collectives::~Collectives() {
  // A failed call may have left bodies in flight from the scratch; it must
  // outlive them (see the header), so it is given up rather than freed.
  // Given scratch is its owner's to keep. The machines-first steps send
  // this object's scratch too (its block), and keep their own.
  if (sends_in_flight() > 0 && !work_.empty()) {
    spdlog::warn("rank {}: collectives destroyed with sends in flight; keeping their buffer", rank());
    new std::vector<std::byte>(std::move(work_));
  }
}

// Operator new's alignment, and the given scratch's 64 bytes, suit every
// element type.
template <typename T>
StatusOr<T*> Collectives::work(size_t count, const char* op, uint64_t tag) {
  const size_t bytes = count * sizeof(T);
  if (!given_) {
    if (work_.size() < bytes) work_.resize(bytes);
    return reinterpret_cast<T*>(work_.data());
  }
  if (bytes > scratch_.size())
    return internal_error("{} {}: needs {} bytes of scratch, {} given", op, describe_tag(tag), bytes, scratch_.size());
  return reinterpret_cast<T*>(scratch_.data());
}

void Collectives::set_blocks(size_t count) {
  blocks_.resize(static_cast<size_t>(world()));
  for (int j = 0; j < world(); ++j) blocks_[static_cast<size_t>(j)] = block_range(count, world(), j);
}

Status Collectives::set_blocks(std::span<const size_t> counts, size_t total, const char* op, uint64_t tag) {
  if (counts.size() != static_cast<size_t>(world())) {
    return invalid_argument("{} {}: {} block sizes for {} ranks", op, describe_tag(tag), counts.size(), world());
  }
  blocks_.resize(counts.size());
  size_t at = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    blocks_[j] = BlockRange{at, counts[j]};
    at += counts[j];
  }
  if (at != total) {
    return invalid_argument("{} {}: block sizes sum to {}, the buffer holds {}", op, describe_tag(tag), at, total);
  }
  return Status::ok_status();
}

int Collectives::peer(int offset) const { return ((rank() + offset) % world() + world()) % world(); }

template <typename T>
size_t Collectives::chunk_elements() const {
  return std::max<size_t>(1, options_.chunk_bytes / sizeof(T));
}

Status Collectives::begin(const char* op, uint64_t tag) {
  if (failed_) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("rank {}: collective {} refused: an earlier collective on this object failed", rank(),
                              describe_tag(tag)));
  }
  deadline_ = outer_deadline_ ? *outer_deadline_ : Clock::now() + options_.timeout;
  liveness_.restart();
  if (options_.record) options_.record->begin(options_.caller, op, 0);
  sent_.assign(static_cast<size_t>(world()), 0);
  received_from_.assign(static_cast<size_t>(world()), 0);
  return Status::ok_status();
}

Status Collectives::end(const char* op, const char* algorithm, uint64_t tag, Status status) {
  received_.reset();
  last_op_ = op;
  last_algorithm_ = world() == 1 ? "local" : algorithm;
  if (status.ok()) status = patiently([&] { return tracker_.wait(deadline_); });
  if (options_.record) options_.record->end(options_.caller, status.ok());
  if (status.ok()) return status;
  if (status.code() != Code::kInvalidArgument && status.code() != Code::kFailedPrecondition) failed_ = true;
  return status.with_context(fmt::format("{} {} on rank {} of {}", op, describe_tag(tag), rank(), world()));
}

// ---- all_reduce and reduce_scatter: the ring ------------------------------
// Step s (of 2(n-1)) sends block r-s-1 to the right and receives block r-s-2
// from the left: the first n-1 steps add the received partial sums (after
// them rank r holds the full sum of block r), the last n-1 pass the finished
// blocks around. A chunk is forwarded as soon as it is received, so the
// steps pipeline around the ring.

// An average of integers is not an integer: refused, as NCCL does.
template <typename T>
Status integer_average_refused(ReduceOp op, const char* name, uint64_t tag) {
  if (std::is_integral_v<T> && op == ReduceOp::kAverage)
    return invalid_argument("{} {}: the average of i32 values is not an i32 (sum, then divide)", name,
                            describe_tag(tag));
  return Status::ok_status();
}

template <typename T>
Status Collectives::all_reduce_t(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op) {
  RILL_RETURN_IF_ERROR(integer_average_refused<T>(op, "all_reduce", tag));
  if (in.size() != out.size()) {
    return invalid_argument("all_reduce {}: input has {} elements, output {}", describe_tag(tag), in.size(),
                            out.size());
  }
  RILL_RETURN_IF_ERROR(begin("all_reduce", tag));
  const bool small = world() > 1 && in.size() * sizeof(T) <= options_.direct_bytes;
  const bool direct = small && world() <= kCollectiveDirectMaxRanks, doubling = small && !direct;
  // Not with given scratch: its steps would need scratch of their own.
  const bool tiered = !small && !given_ && tiers() != nullptr;
  Status status = direct     ? all_reduce_direct(in, out, tag, op)
                  : doubling ? all_reduce_doubling(in, out, tag, op)
                  : tiered   ? all_reduce_tiered(in, out, tag, op)
                             : all_reduce_ring(in, out, tag, op);
  status = end("all_reduce", direct ? "direct" : doubling ? "recursive doubling" : tiered ? "machines first" : "ring",
               tag, std::move(status));
  if (status.ok()) finish(op, out);  // after end(): the sends read out until then
  return status;
}

// Every rank sends its whole input to every other and adds all of them up in
// rank order, so each computes the same bits: one message latency instead of
// the ring's 2(n-1), for (n-1) times the traffic.
template <typename T>
Status Collectives::all_reduce_direct(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op) {
  const int n = world(), r = rank();
  const size_t count = in.size();
  std::span<const T> mine = in;
  if (in.data() == out.data() && count > 0) {
    RILL_ASSIGN_OR_RETURN(T * own, work<T>(count, "all_reduce", tag));
    std::copy(in.begin(), in.end(), own);
    mine = std::span<const T>(own, count);
  }
  for (int k = 1; k < n; ++k) {
    RILL_RETURN_IF_ERROR(send_chunk(peer(k), bytes_of(mine.data(), count), tag));
  }
  for (int q = 0; q < n; ++q) {
    const std::byte* data = reinterpret_cast<const std::byte*>(mine.data());
    if (q != r) {
      RILL_ASSIGN_OR_RETURN(data, recv_chunk(q, count * sizeof(T), tag));
    }
    if (q == 0) {
      if (count > 0) std::memcpy(out.data(), data, count * sizeof(T));
    } else {
      combine_typed(op, out.data(), out.data(), data, count);
    }
    received_.reset();
  }
  return Status::ok_status();
}

// Recursive doubling among p, the largest power of two not above the world:
// in round k rank r and r ^ k exchange their partial sums, and both combine
// them in rank order (the lower rank's first), so the ranks of each group of
// 2k hold the same bits. The ranks past p first hand their input to rank
// r - p, which adds it after its own, and get the sum back at the end.
// Small tensors only: every rank sends its whole tensor log2(p) times.
template <typename T>
Status Collectives::all_reduce_doubling(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op) {
  const int n = world(), r = rank();
  const size_t count = in.size(), bytes = count * sizeof(T);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  if (in.data() != out.data() && count > 0) std::copy(in.begin(), in.end(), out.begin());
  RILL_ASSIGN_OR_RETURN(T * partner, work<T>(count, "all_reduce", tag));
  const std::span<const std::byte> mine = bytes_of(out.data(), count);
  if (r >= p) {  // handed over, then given the sum
    RILL_RETURN_IF_ERROR(send_chunk(r - p, mine, tag));
    RILL_ASSIGN_OR_RETURN(const std::byte* sum, recv_chunk(r - p, bytes, tag));
    if (count > 0) std::memcpy(out.data(), sum, bytes);
    return Status::ok_status();
  }
  if (r + p < n) {
    RILL_ASSIGN_OR_RETURN(const std::byte* extra, recv_chunk(r + p, bytes, tag));
    combine_typed(op, out.data(), out.data(), extra, count);
  }
  for (int k = 1; k < p; k *= 2) {
    const int other = r ^ k;
    RILL_RETURN_IF_ERROR(send_chunk(other, mine, tag));
    RILL_ASSIGN_OR_RETURN(const std::byte* theirs, recv_chunk(other, bytes, tag));
    // `out` is sent without a copy: it changes only once the send is done.
    RILL_RETURN_IF_ERROR(patiently([&] { return tracker_.wait(deadline_); }));
    if (other > r) {
      combine_typed(op, out.data(), out.data(), theirs, count);
    } else {
      if (count > 0) std::memcpy(partner, theirs, bytes);
      combine_typed(op, partner, partner, reinterpret_cast<const std::byte*>(out.data()), count);
      if (count > 0) std::memcpy(out.data(), partner, bytes);
    }
  }
  if (r + p < n) RILL_RETURN_IF_ERROR(send_chunk(r + p, mine, tag));
  return Status::ok_status();
}

template <typename T>
Status Collectives::all_reduce_ring(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op) {
  const int n = world();
  if (n == 1) {
    if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
    return Status::ok_status();
  }
  const int right = peer(1), left = peer(-1);
  const size_t chunk = chunk_elements<T>();
  set_blocks(in.size());
  BlockRange first = blocks_[static_cast<size_t>(peer(-1))];
  RILL_RETURN_IF_ERROR(send_chunks(right, bytes_of(in.data() + first.begin, first.size), chunk * sizeof(T), tag));
  const int steps = 2 * (n - 1);
  for (int s = 0; s < steps; ++s) {
    BlockRange block = blocks_[static_cast<size_t>(peer(-s - 2))];
    for (size_t offset = 0; offset < block.size; offset += chunk) {
      const size_t len = std::min(chunk, block.size - offset), at = block.begin + offset;
      RILL_ASSIGN_OR_RETURN(const std::byte* data, recv_chunk(left, len * sizeof(T), tag));
      if (s < n - 1) {
        combine_typed(op, out.data() + at, in.data() + at, data, len);
      } else {
        std::memcpy(out.data() + at, data, len * sizeof(T));
      }
      received_.reset();
      if (s + 1 < steps) RILL_RETURN_IF_ERROR(send_chunk(right, bytes_of(out.data() + at, len), tag));
    }
  }
  return Status::ok_status();
}

template <typename T>
Status Collectives::reduce_scatter_t(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op) {
  RILL_RETURN_IF_ERROR(integer_average_refused<T>(op, "reduce_scatter", tag));
  BlockRange own = block_range(in.size(), world(), rank());
  if (out.size() != own.size) {
    return invalid_argument("reduce_scatter {}: output has {} elements, rank {}'s block of {} has {}",
                            describe_tag(tag), out.size(), rank(), in.size(), own.size);
  }
  RILL_RETURN_IF_ERROR(begin("reduce_scatter", tag));
  set_blocks(in.size());
  Status status = end("reduce_scatter", "ring", tag, reduce_scatter_ring(in, out, tag, op));
  if (status.ok()) finish(op, out);
  return status;
}

template <typename T>
Status Collectives::reduce_scatter_v_t(std::span<const T> in, std::span<T> out, std::span<const size_t> counts,
                                     uint64_t tag, ReduceOp op) {
  RILL_RETURN_IF_ERROR(integer_average_refused<T>(op, "reduce_scatter_v", tag));
  RILL_RETURN_IF_ERROR(set_blocks(counts, in.size(), "reduce_scatter_v", tag));
  if (out.size() != blocks_[static_cast<size_t>(rank())].size) {
    return invalid_argument("reduce_scatter_v {}: output has {} elements, rank {}'s block has {}", describe_tag(tag),
                            out.size(), rank(), blocks_[static_cast<size_t>(rank())].size);
  }
  RILL_RETURN_IF_ERROR(begin("reduce_scatter_v", tag));
  Status status = end("reduce_scatter_v", "ring", tag, reduce_scatter_ring(in, out, tag, op));
  if (status.ok()) finish(op, out);
  return status;
}

// Over blocks_ (set by the caller).
template <typename T>
Status Collectives::reduce_scatter_ring(std::span<const T> in, std::span<T> out, uint64_t tag,
                                        ReduceOp op) {
  const int n = world();
  const size_t count = in.size(), chunk = chunk_elements<T>();
  BlockRange own = blocks_[static_cast<size_t>(rank())];
  if (n == 1) {
    std::copy(in.begin(), in.end(), out.begin());
    return Status::ok_status();
  }
  RILL_ASSIGN_OR_RETURN(T * scratch, work<T>(count, "reduce_scatter", tag));
  const int right = peer(1), left = peer(-1);
  BlockRange first = blocks_[static_cast<size_t>(peer(-1))];
  RILL_RETURN_IF_ERROR(send_chunks(right, bytes_of(in.data() + first.begin, first.size), chunk * sizeof(T), tag));
  for (int s = 0; s < n - 1; ++s) {
    BlockRange block = blocks_[static_cast<size_t>(peer(-s - 2))];
    const bool last = s == n - 2;  // then block is this rank's own
    for (size_t offset = 0; offset < block.size; offset += chunk) {
      const size_t len = std::min(chunk, block.size - offset), at = block.begin + offset;
      T* destination = last ? out.data() + (at - own.begin) : scratch + at;
      RILL_ASSIGN_OR_RETURN(const std::byte* data, recv_chunk(left, len * sizeof(T), tag));
      combine_typed(op, destination, in.data() + at, data, len);
      received_.reset();
      if (!last) RILL_RETURN_IF_ERROR(send_chunk(right, bytes_of(destination, len), tag));
    }
  }
  return Status::ok_status();
}

// ---- reduce: a pipelined chain ---------------------------------------------

template <typename T>
Status Collectives::reduce_t(std::span<const T> in, std::span<T> out, int root, uint64_t tag, ReduceOp op) {
  RILL_RETURN_IF_ERROR(integer_average_refused<T>(op, "reduce", tag));
  if (root < 0 || root >= world()) return invalid_argument("reduce {}: root {} is not a rank", describe_tag(tag), root);
  if (rank() == root && out.size() != in.size()) {
    return invalid_argument("reduce {}: output has {} elements, input {}", describe_tag(tag), out.size(), in.size());
  }
  RILL_RETURN_IF_ERROR(begin("reduce", tag));
  Status status = end("reduce", "pipelined chain", tag, reduce_chain(in, out, root, tag, op));
  if (status.ok() && rank() == root) finish(op, out);
  return status;
}

// The chain runs root+1, root+2, ..., root: each adds its input to what the
// previous one sent and passes it on.
template <typename T>
Status Collectives::reduce_chain(std::span<const T> in, std::span<T> out, int root, uint64_t tag,
                                 ReduceOp op) {
  const int n = world(), r = rank();
  const size_t count = in.size(), chunk = chunk_elements<T>();
  if (n == 1) {
    std::copy(in.begin(), in.end(), out.begin());
    return Status::ok_status();
  }
  const int position = ((r - root - 1) % n + n) % n;
  if (position == 0) return send_chunks(peer(1), bytes_of(in.data(), count), chunk * sizeof(T), tag);
  T* destination = out.data();
  if (r != root) {
    RILL_ASSIGN_OR_RETURN(destination, work<T>(count, "reduce", tag));
  }
  for (size_t at = 0; at < count; at += chunk) {
    const size_t len = std::min(chunk, count - at);
    RILL_ASSIGN_OR_RETURN(const std::byte* data, recv_chunk(peer(-1), len * sizeof(T), tag));
    combine_typed(op, destination + at, in.data() + at, data, len);
    received_.reset();
    if (r != root) RILL_RETURN_IF_ERROR(send_chunk(peer(1), bytes_of(destination + at, len), tag));
  }
  return Status::ok_status();
}

// The element types the reductions take.
Status Collectives::all_reduce(std::span<const float> in, std::span<float> out, uint64_t tag, ReduceOp op) {
  return all_reduce_t(in, out, tag, op);
}
Status Collectives::all_reduce(std::span<const int32_t> in, std::span<int32_t> out, uint64_t tag, ReduceOp op) {
  return all_reduce_t(in, out, tag, op);
}
Status Collectives::reduce_scatter(std::span<const float> in, std::span<float> out, uint64_t tag, ReduceOp op) {
  return reduce_scatter_t(in, out, tag, op);
}
Status Collectives::reduce_scatter(std::span<const int32_t> in, std::span<int32_t> out, uint64_t tag, ReduceOp op) {
  return reduce_scatter_t(in, out, tag, op);
}
Status Collectives::reduce_scatter_v(std::span<const float> in, std::span<float> out, std::span<const size_t> counts,
                                     uint64_t tag, ReduceOp op) {
  return reduce_scatter_v_t(in, out, counts, tag, op);
}
Status Collectives::reduce_scatter_v(std::span<const int32_t> in, std::span<int32_t> out,
                                     std::span<const size_t> counts, uint64_t tag, ReduceOp op) {
  return reduce_scatter_v_t(in, out, counts, tag, op);
}
Status Collectives::reduce(std::span<const float> in, std::span<float> out, int root, uint64_t tag, ReduceOp op) {
  return reduce_t(in, out, root, tag, op);
}
Status Collectives::reduce(std::span<const int32_t> in, std::span<int32_t> out, int root, uint64_t tag,
                           ReduceOp op) {
  return reduce_t(in, out, root, tag, op);
}
Status Collectives::all_reduce(std::span<const BFloat16> in, std::span<BFloat16> out, uint64_t tag, ReduceOp op) {
  return all_reduce_t(in, out, tag, op);
}
Status Collectives::all_reduce(std::span<const Float16> in, std::span<Float16> out, uint64_t tag, ReduceOp op) {
  return all_reduce_t(in, out, tag, op);
}
Status Collectives::reduce_scatter(std::span<const BFloat16> in, std::span<BFloat16> out, uint64_t tag,
                                   ReduceOp op) {
  return reduce_scatter_t(in, out, tag, op);
}
Status Collectives::reduce_scatter(std::span<const Float16> in, std::span<Float16> out, uint64_t tag, ReduceOp op) {
  return reduce_scatter_t(in, out, tag, op);
}
Status Collectives::reduce_scatter_v(std::span<const BFloat16> in, std::span<BFloat16> out,
                                     std::span<const size_t> counts, uint64_t tag, ReduceOp op) {
  return reduce_scatter_v_t(in, out, counts, tag, op);
}
Status Collectives::reduce_scatter_v(std::span<const Float16> in, std::span<Float16> out,
                                     std::span<const size_t> counts, uint64_t tag, ReduceOp op) {
  return reduce_scatter_v_t(in, out, counts, tag, op);
}
Status Collectives::reduce(std::span<const BFloat16> in, std::span<BFloat16> out, int root, uint64_t tag,
                           ReduceOp op) {
  return reduce_t(in, out, root, tag, op);
}
Status Collectives::reduce(std::span<const Float16> in, std::span<Float16> out, int root, uint64_t tag,
                           ReduceOp op) {
  return reduce_t(in, out, root, tag, op);
}

}  // namespace rill::comm
