#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "actor/body.h"

namespace rill {
namespace {

// dst = a op b over `box`, where a and b both cover src_region (comm's
// combine, as the collectives across nodes: i32 sums wrap around).
template <typename T>
void sum_rows(const std::byte* a, const std::byte* b, const Region& src_region, std::byte* dst,
              const Region& dst_region, const Region& box, comm::ReduceOp op) {
  const T* x = reinterpret_cast<const T*>(a);
  const T* y = reinterpret_cast<const T*>(b);
  T* to = reinterpret_cast<T*>(dst);
  for_each_row(src_region, dst_region, box, [&](int64_t s, int64_t d, int64_t n) {
    comm::combine_into(op, to + d, x + s, reinterpret_cast<const std::byte*>(y + s), static_cast<size_t>(n));
  });
}

// dst = dst op src over `box`.
template <typename T>
void add_rows(const std::byte* src, const Region& src_region, std::byte* dst, const Region& dst_region,
              const Region& box, comm::ReduceOp op) {
  const T* from = reinterpret_cast<const T*>(src);
  T* to = reinterpret_cast<T*>(dst);
  for_each_row(src_region, dst_region, box, [&](int64_t s, int64_t d, int64_t n) {
    comm::combine_into(op, to + d, to + d, reinterpret_cast<const std::byte*>(from + s), static_cast<size_t>(n));
  });
}

}  // namespace

BoxingBody::BoxingBody(BoxingPlan plan, comm::Collectives* collectives, uint64_t tag, comm::ReduceOp op,
                       std::byte* scratch)
    : p_(std::move(plan)), collectives_(collectives), tag_(tag), op_(op) {
  // The compressors' buffers are made here, not in an act (acts do not allocate).
  if (p_.compress == BoxingPlan::Compress::kBf16)
    bf16_ = std::make_unique<Bf16AllReduce>(p_.exchange_in_bytes / sizeof(float), p_.nodes);
  if (p_.compress == BoxingPlan::Compress::kPowerSgd)
    powersgd_ = std::make_unique<PowerSgdAllReduce>(powersgd_layout(p_.tensors, p_.compress_rank), p_.nodes,
                                                    p_.compress_seed);
  if (scratch == nullptr && p_.scratch_bytes() > 0) {
    own_scratch_.resize(p_.scratch_bytes());
    scratch = own_scratch_.data();
  }
  send_ = scratch;
  recv_ = scratch == nullptr ? nullptr : scratch + p_.send_bytes;
  // The collectives take their scratch from the same place, sized for
  // their default direct size: collectives set up with another need what
  // their own options say, which the plan may not have.
  if (collectives_ == nullptr || p_.exchange == Exchange::kNone) return;
  const size_t need = p_.exchange_scratch_bytes(collectives_->options().direct_bytes);
  if (need > p_.exchange_scratch_bytes()) {
    setup_ = internal_error("boxing {} -> {}: its collectives need {} bytes of scratch (direct_bytes {}), the plan "
                            "gives {}",
                            p_.in.to_string(), p_.out.to_string(), need, collectives_->options().direct_bytes,
                            p_.exchange_scratch_bytes());
    return;
  }
  if (p_.exchange_scratch_bytes() > 0)
    collectives_->use_scratch({scratch + p_.exchange_offset(), p_.exchange_scratch_bytes()});
}

std::byte* BoxingBody::resolve(const Ref& ref, const ActIo& io) {
  switch (ref.kind) {
    case Ref::kInput: return static_cast<std::byte*>(io.inputs[static_cast<size_t>(ref.index)]->data) + ref.offset;
    case Ref::kOutput: return static_cast<std::byte*>(io.outputs[static_cast<size_t>(ref.index)]->data) + ref.offset;
    case Ref::kSend: return send_ + ref.offset;
    case Ref::kRecv: return recv_ + ref.offset;
  }
  return nullptr;
}

void BoxingBody::run(const std::vector<Step>& steps, const ActIo& io) {
  for (const Step& s : steps) {
    std::byte* dst = resolve(s.dst, io);
    switch (s.op) {
      case Step::kZero:
        std::memset(dst, 0, static_cast<size_t>(s.dst_region.size()) * p_.element);
        break;
      case Step::kCopy:
        copy_region(resolve(s.src, io), s.src_region, dst, s.dst_region, s.box, p_.element);
        break;
      case Step::kAdd:
        visit_dtype(p_.logical.dtype, [&]<typename T>(std::type_identity<T>) {
          add_rows<T>(resolve(s.src, io), s.src_region, dst, s.dst_region, s.box, op_);
        });
        break;
      case Step::kSum:
        visit_dtype(p_.logical.dtype, [&]<typename T>(std::type_identity<T>) {
          sum_rows<T>(resolve(s.src, io), resolve(s.src2, io), s.src_region, dst, s.dst_region, s.box, op_);
        });
        break;
    }
  }
}

Status BoxingBody::exchange(const ActIo& io) {
  if (p_.exchange == Exchange::kNone) return {};
  if (!collectives_)
    return internal_error("boxing {} -> {} across {} nodes has no collectives", p_.in.to_string(), p_.out.to_string(),
                          p_.nodes);
  if (collectives_->world() != p_.nodes || collectives_->rank() != p_.node_of(p_.first_rank))
    return internal_error("boxing: collectives of rank {} of {}, but this is node {} of {}", collectives_->rank(),
                          collectives_->world(), p_.node_of(p_.first_rank), p_.nodes);
  std::byte* in = resolve(p_.exchange_in, io);
  std::byte* out = resolve(p_.exchange_out, io);
  // The elements of the logical tensor's dtype, for the reductions.
  auto elements = [&]<typename T>(std::type_identity<T>, std::byte* p, size_t bytes) {
    return std::span<T>(reinterpret_cast<T*>(p), bytes / sizeof(T));
  };
  // Compressed from the plan's start step on (train.compression_start_step).
  const bool compress = io.step >= p_.compress_start;
  switch (p_.exchange) {
    case Exchange::kNone: return {};
    case Exchange::kAllReduce:
      if (bf16_ && compress)
        return bf16_->run(*collectives_, elements(std::type_identity<float>{}, in, p_.exchange_in_bytes),
                          elements(std::type_identity<float>{}, out, p_.exchange_out_bytes), tag_, op_);
      if (powersgd_ && compress) {  // in place in out (it adds the carried error to what it is given)
        if (out != in) std::memcpy(out, in, p_.exchange_in_bytes);
        return powersgd_->run(*collectives_, elements(std::type_identity<float>{}, out, p_.exchange_out_bytes), tag_,
                              op_);
      }
      return visit_dtype(p_.logical.dtype, [&]<typename T>(std::type_identity<T> t) {
        return collectives_->all_reduce(std::span<const T>(elements(t, in, p_.exchange_in_bytes)),
                                        elements(t, out, p_.exchange_out_bytes), tag_, op_);
      });
    case Exchange::kReduceScatter:  // p_.recv_counts: each node's block in elements
      return visit_dtype(p_.logical.dtype, [&]<typename T>(std::type_identity<T> t) {
        return collectives_->reduce_scatter_v(std::span<const T>(elements(t, in, p_.exchange_in_bytes)),
                                              elements(t, out, p_.exchange_out_bytes), p_.recv_counts, tag_, op_);
      });
    case Exchange::kAllGather:
      return collectives_->all_gather_v({in, p_.exchange_in_bytes}, {out, p_.exchange_out_bytes}, p_.send_counts, tag_);
    case Exchange::kAllToAll:
      return collectives_->all_to_all_v({in, p_.exchange_in_bytes}, p_.send_counts, {out, p_.exchange_out_bytes},
                                        p_.recv_counts, tag_);
  }
  return {};
}

Status BoxingBody::act(const ActIo& io) {
  RILL_RETURN_IF_ERROR(setup_);
  if (p_.chain)
    return internal_error("boxing {} -> {}: no one task does it (the compiler chains it)", p_.in.to_string(),
                          p_.out.to_string());
  run(p_.before, io);
  RILL_RETURN_IF_ERROR(exchange(io));
  run(p_.after, io);
  if (snapshot_ && every_ > 0 && (io.step + 1) % every_ == 0) snapshot_(io.step + 1, carried());
  if (every_step_) every_step_(io.step + 1, carried());
  return {};
}

BoxingBody::Carried BoxingBody::carried() const {
  if (bf16_) return {bf16_->feedback().carried(), {}};
  if (powersgd_) return {powersgd_->carried(), powersgd_->q()};
  return {};
}

Status BoxingBody::restore(std::span<const float> error, std::span<const float> q, int64_t steps_done) {
  const Carried now = carried();
  if (error.size() != now.error.size() || q.size() != now.q.size())
    return invalid_argument("boxing {} -> {} carries {} error values and {} of Q; {} and {} were given",
                            p_.in.to_string(), p_.out.to_string(), now.error.size(), now.q.size(), error.size(),
                            q.size());
  if (bf16_) bf16_->restore(error);
  if (powersgd_)
    RILL_RETURN_IF_ERROR(powersgd_->restore(
        error, q, static_cast<uint64_t>(std::max<int64_t>(0, steps_done - p_.compress_start))));
  return {};
}

std::string BoxingBody::collective() const {
  if (collectives_ == nullptr || *collectives_->last_op() == '\0') return {};
  return fmt::format("{} {}", collectives_->last_op(), collectives_->last_algorithm());
}

}  // namespace rill
