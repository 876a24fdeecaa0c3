#include "actor/gradient_compression.h"

#include <algorithm>
#include <cmath>

namespace rill {

bool Bf16ErrorFeedback::restore(std::span<const float> carried) {
  if (carried.size() != carried_.size()) return false;
  std::copy(carried.begin(), carried.end(), carried_.begin());
  return true;
}

void Bf16ErrorFeedback::compress(std::span<const float> in, std::span<BFloat16> wire) {
  if (carried_.size() != in.size()) carried_.assign(in.size(), 0.0f);
  for (size_t i = 0; i < in.size(); ++i) {
    const float value = in[i] + carried_[i];
    wire[i] = BFloat16::from_float(value);
    // A step whose gradients overflowed (skipped under loss scaling) must
    // not carry inf - inf into every later one.
    const float lost = value - wire[i].to_float();
    carried_[i] = std::isfinite(lost) ? lost : 0.0f;
  }
}

void Bf16ErrorFeedback::widen(std::span<const BFloat16> wire, std::span<float> out) {
  for (size_t i = 0; i < wire.size(); ++i) out[i] = wire[i].to_float();
}

Bf16AllReduce::Bf16AllReduce(size_t elements, int world) : feedback_(elements), wire_(elements), world_(world) {
  const int ranks = world < 1 ? 1 : world;
  recv_counts_.resize(static_cast<size_t>(ranks));
  block_counts_.resize(static_cast<size_t>(ranks));
  for (int j = 0; j < ranks; ++j)
    block_counts_[static_cast<size_t>(j)] = comm::block_range(elements, ranks, j).size * sizeof(BFloat16);
  // Room for the largest block (the first: blocks differ by at most one
  // element, the longer first) from every rank.
  received_.resize(comm::block_range(elements, ranks, 0).size * static_cast<size_t>(ranks));
}

Status Bf16AllReduce::run(comm::Collectives& collectives, std::span<const float> in, std::span<float> out,
                          uint64_t tag, comm::ReduceOp op) {
  if (op != comm::ReduceOp::kSum && op != comm::ReduceOp::kAverage)
    return invalid_argument("the bf16 all-reduce of gradients sums or averages, not {}", comm::reduce_op_name(op));
  if (in.size() != wire_.size() || out.size() != wire_.size() || collectives.world() != world_)
    return internal_error("the bf16 all-reduce was made for {} values among {} ranks, called with {} -> {} among {}",
                          wire_.size(), world_, in.size(), out.size(), collectives.world());
  feedback_.compress(in, wire_);
  if (world_ > 1) {
    const int rank = collectives.rank();
    const comm::BlockRange mine = comm::block_range(wire_.size(), world_, rank);
    std::fill(recv_counts_.begin(), recv_counts_.end(), mine.size * sizeof(BFloat16));
    const std::span<BFloat16> received(received_.data(), mine.size * static_cast<size_t>(world_));
    // Block j of wire_ goes to rank j: the send counts are the blocks'.
    RILL_RETURN_IF_ERROR(collectives.all_to_all_v(std::as_bytes(std::span<const BFloat16>(wire_)), block_counts_,
                                                  std::as_writable_bytes(received), recv_counts_, tag));
    const float world = static_cast<float>(world_);
    for (size_t i = 0; i < mine.size; ++i) {
      float sum = received[i].to_float();
      for (size_t j = 1; j < static_cast<size_t>(world_); ++j) sum += received[j * mine.size + i].to_float();
      wire_[mine.begin + i] = BFloat16::from_float(op == comm::ReduceOp::kAverage ? sum / world : sum);
    }
    const std::span<BFloat16> block(wire_.data() + mine.begin, mine.size);
    RILL_RETURN_IF_ERROR(collectives.all_gather_v(std::as_bytes(std::span<const BFloat16>(block)),
                                                  std::as_writable_bytes(std::span<BFloat16>(wire_)), block_counts_,
                                                  tag));
  }
  Bf16ErrorFeedback::widen(wire_, out);
  return {};
}

}  // namespace rill
