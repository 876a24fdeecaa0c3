#include <cstring>
#include <type_traits>

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

// Whether the pieces of an S(axis) tensor lie one after another, in rank
// order, in the whole tensor's row-major layout (every axis before `axis` is 1).
bool pieces_contiguous(const Shape& shape, const Sbp& sbp) {
  for (int i = 0; i < sbp.axis && i < static_cast<int>(shape.size()); ++i)
    if (shape[i] != 1) return false;
  return true;
}

}  // namespace

BoxingBody::BoxingBody(NdSbp in_sbp, NdSbp out_sbp, int parallel, TensorMeta logical, int first_rank,
                       int local_pieces, comm::Collectives* collectives, uint64_t tag, int piece,
                       comm::ReduceOp op)
    : in_(in_sbp),
      out_(out_sbp),
      parallel_(parallel),
      logical_(std::move(logical)),
      element_(dtype_size(logical_.dtype)),
      first_rank_(first_rank),
      local_(local_pieces > 0 ? local_pieces : parallel),
      nodes_(parallel / (local_pieces > 0 ? local_pieces : parallel)),
      outputs_(piece >= 0 || out_sbp.within.kind == Sbp::kBroadcast ? 1 : local_),
      collectives_(collectives),
      tag_(tag),
      piece_(piece),
      op_(op) {
  // The runtime refuses kChain before building a body (no task does it);
  // a body built anyway plans nothing and its act fails.
  switch (boxing_form(in_, out_, nodes_)) {
    case BoxingForm::kWithinNode: plan_within_node(); break;
    case BoxingForm::kFlat: boxing_exchanges(in_, out_, nodes_) ? plan_across_nodes() : plan_local(true); break;
    case BoxingForm::kLanes: boxing_exchanges(in_, out_, nodes_) ? plan_lanes() : plan_local(false); break;
    case BoxingForm::kChain: chain_ = true; break;
  }
}

BoxingBody::BoxingBody(const std::vector<TensorMeta>& bucket, int parallel, int first_rank, int local_pieces,
                       comm::Collectives* collectives, uint64_t tag)
    : in_(Sbp::partial_sum()),
      out_(Sbp::broadcast()),
      parallel_(parallel),
      logical_(bucket.empty() ? TensorMeta{} : bucket[0]),
      element_(dtype_size(DType::kF32)),
      first_rank_(first_rank),
      local_(local_pieces > 0 ? local_pieces : parallel),
      nodes_(parallel / (local_pieces > 0 ? local_pieces : parallel)),
      outputs_(static_cast<int>(bucket.size())),
      collectives_(collectives),
      tag_(tag) {
  plan_bucket(bucket);
}

BoxingBody::BoxingBody(TensorMeta logical, const std::vector<Region>& inputs, const Region& output, bool sum)
    : in_(Sbp::broadcast()),
      out_(Sbp::broadcast()),
      parallel_(1),
      logical_(std::move(logical)),
      element_(dtype_size(logical_.dtype)),
      first_rank_(0),
      local_(1),
      nodes_(1),
      outputs_(1),
      collectives_(nullptr),
      tag_(0) {
  bool first = true;  // a sum starts from a copy (inputs of a sum cover the output alike)
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Region box = intersect(inputs[k], output);
    if (box.size() == 0) continue;
    step(sum && !first ? Step::kAdd : Step::kCopy, Ref{Ref::kInput, static_cast<int>(k), 0}, inputs[k],
         Ref{Ref::kOutput, 0, 0}, output, box);
    first = false;
  }
}

// Tensor k's pieces are inputs k * local_ ...; its sum lands at its offset
// in send_, the all-reduce runs in place, and output k copies its part.
void BoxingBody::plan_bucket(const std::vector<TensorMeta>& bucket) {
  size_t offset = 0;
  for (size_t k = 0; k < bucket.size(); ++k) {
    const Region whole = whole_region(bucket[k].shape);
    const Ref at{Ref::kSend, 0, offset};
    adding_ = &before_;
    sum_inputs(whole, at, whole, whole, static_cast<int>(k) * local_);
    adding_ = &after_;
    step(Step::kCopy, at, whole, Ref{Ref::kOutput, static_cast<int>(k), 0}, whole, whole);
    offset += bucket[k].bytes();
  }
  send_.resize(offset);
  exchange_ = Exchange::kAllReduce;
  exchange_in_ = exchange_out_ = Ref{Ref::kSend, 0, 0};
  exchange_in_bytes_ = exchange_out_bytes_ = offset;
}

Region BoxingBody::in_piece(int rank) const { return piece_region(logical_.shape, in_, nodes_, local_, rank); }
Region BoxingBody::out_piece(int rank) const { return piece_region(logical_.shape, out_, nodes_, local_, rank); }

void BoxingBody::step(Step::Op op, Ref src, const Region& src_region, Ref dst, const Region& dst_region,
                      const Region& box) {
  step(op, src, src_region, dst, dst_region, box, Ref{});
}

void BoxingBody::step(Step::Op op, Ref src, const Region& src_region, Ref dst, const Region& dst_region,
                      const Region& box, Ref src2) {
  if (op != Step::kZero && box.size() == 0) return;
  adding_->push_back(Step{op, src, src2, dst, src_region, dst_region, box});
}

// dst[box] = the sum of the node's local_ P pieces, inputs base ... (each
// covering `inputs`), in input order: the first two in one pass, then one
// pass per further input.
void BoxingBody::sum_inputs(const Region& inputs, Ref dst, const Region& dst_region, const Region& box, int base) {
  auto in = [base](int i) { return Ref{Ref::kInput, base + i, 0}; };
  if (local_ == 1) {
    step(Step::kCopy, in(0), inputs, dst, dst_region, box);
    return;
  }
  step(Step::kSum, in(0), inputs, dst, dst_region, box, in(1));
  for (int i = 2; i < local_; ++i) step(Step::kAdd, in(i), inputs, dst, dst_region, box);
}

// Output slot `slot`, covering `target`, from this node's inputs, turning
// `from` into `to`: input `only`, or all of them when it is -1. B -> P: the
// holder keeps the value, the other pieces are 0.
void BoxingBody::convert(Sbp::Kind from, Sbp::Kind to, int only, int slot, const Region& target, bool holder) {
  auto in = [](int i) { return Ref{Ref::kInput, i, 0}; };
  const Ref dst{Ref::kOutput, slot, 0};
  const int begin = only >= 0 ? only : 0, end = only >= 0 ? only + 1 : local_;
  switch (from) {
    case Sbp::kBroadcast:  // to S: slice; to P: the holder has it
      if (to == Sbp::kPartialSum && !holder) step(Step::kZero, {}, {}, dst, target, target);
      else step(Step::kCopy, in(begin), in_piece(first_rank_ + begin), dst, target, target);
      break;
    case Sbp::kSplit:  // to P: its own piece, zeros around; else what each piece holds of target
      if (to == Sbp::kPartialSum) step(Step::kZero, {}, {}, dst, target, target);
      for (int i = begin; i < end; ++i) {
        const Region from_region = in_piece(first_rank_ + i);
        step(Step::kCopy, in(i), from_region, dst, target, intersect(from_region, target));
      }
      break;
    case Sbp::kPartialSum:  // this piece of the sum of the inputs
      sum_inputs(in_piece(first_rank_), dst, target, target);
      break;
  }
}

// Between the devices of each node (one node, or `across` unchanged): the
// node's pieces are all it needs. With piece_ set, only that output piece.
void BoxingBody::plan_within_node() {
  adding_ = &after_;
  const Sbp::Kind from = in_.within.kind, to = out_.within.kind;
  const int begin = piece_ >= 0 ? piece_ : 0, end = piece_ >= 0 ? piece_ + 1 : outputs_;
  for (int j = begin; j < end; ++j) {
    const int only = from == Sbp::kBroadcast ? 0 : from == Sbp::kSplit && to == Sbp::kPartialSum ? j : -1;
    convert(from, to, only, j - begin, out_piece(first_rank_ + j), j == 0);
  }
}

// B -> S, B -> P and S -> P across nodes: each node has what its pieces
// need. `flat`: 1-D over all devices (rank 0 holds a B -> P value); else
// lane by lane (node 0 holds it, each lane its own part).
void BoxingBody::plan_local(bool flat) {
  adding_ = &after_;
  const Sbp::Kind from = in_.across.kind, to = out_.across.kind;
  const int node = node_of(first_rank_);
  for (int j = 0; j < outputs_; ++j)
    convert(from, to, lane_input(j), j, out_piece(first_rank_ + j), flat ? first_rank_ + j == 0 : node == 0);
}

// Conversions that need the pieces of other nodes. Scratch buffers hold
// regions packed one after another, each row-major (the layout of a piece).
void BoxingBody::plan_across_nodes() {
  const Region whole = whole_region(logical_.shape);
  const int node = node_of(first_rank_);
  auto in = [](int i) { return Ref{Ref::kInput, i, 0}; };
  auto out = [](int j) { return Ref{Ref::kOutput, j, 0}; };
  auto send = [](size_t offset) { return Ref{Ref::kSend, 0, offset}; };
  auto recv = [](size_t offset) { return Ref{Ref::kRecv, 0, offset}; };
  send_counts_.assign(static_cast<size_t>(nodes_), 0);
  recv_counts_.assign(static_cast<size_t>(nodes_), 0);
  const size_t whole_bytes = logical_.bytes();
  // Byte offset of each rank's piece when all pieces are packed in rank order.
  auto packed_offsets = [&](const NdSbp& sbp) {
    std::vector<size_t> offsets(static_cast<size_t>(parallel_) + 1, 0);
    for (int k = 0; k < parallel_; ++k)
      offsets[static_cast<size_t>(k) + 1] =
          offsets[static_cast<size_t>(k)] +
          static_cast<size_t>(piece_region(logical_.shape, sbp, nodes_, local_, k).size()) * element_;
    for (int m = 0; m < nodes_; ++m)
      send_counts_[static_cast<size_t>(m)] = offsets[static_cast<size_t>((m + 1) * local_)] -
                                             offsets[static_cast<size_t>(m * local_)];
    return offsets;
  };

  if (in_.across.kind == Sbp::kPartialSum) {
    if (out_.across.kind == Sbp::kBroadcast) {  // local sum into output 0; all-reduce it
      sum_inputs(whole, out(0), whole, whole);
      exchange_ = Exchange::kAllReduce;
      exchange_in_ = exchange_out_ = out(0);
      exchange_in_bytes_ = exchange_out_bytes_ = whole_bytes;
      return;
    }
    // P -> S: every rank's piece of the local sum, packed; reduce-scatter
    // leaves this node's pieces of the global sum.
    std::vector<size_t> offsets = packed_offsets(out_);
    for (int k = 0; k < parallel_; ++k) {
      const Region r = out_piece(k);
      sum_inputs(whole, send(offsets[static_cast<size_t>(k)]), r, r);
    }
    const size_t base = offsets[static_cast<size_t>(first_rank_)];
    for (size_t m = 0; m < send_counts_.size(); ++m) recv_counts_[m] = send_counts_[m] / element_;  // elements
    exchange_through_scratch(Exchange::kReduceScatter, whole_bytes, send_counts_[static_cast<size_t>(node)]);
    adding_ = &after_;
    for (int j = 0; j < local_; ++j) {
      const Region r = out_piece(first_rank_ + j);
      step(Step::kCopy, recv(offsets[static_cast<size_t>(first_rank_ + j)] - base), r, out(j), r, r);
    }
    return;
  }

  // From S(a).
  if (out_.across.kind == Sbp::kBroadcast) {  // all-gather
    std::vector<size_t> offsets = packed_offsets(in_);
    const size_t base = offsets[static_cast<size_t>(first_rank_)];
    const size_t mine = send_counts_[static_cast<size_t>(node)];
    if (pieces_contiguous(logical_.shape, in_.across)) {  // packed order is the layout: gather into output 0
      for (int i = 0; i < local_; ++i) {
        const Region r = in_piece(first_rank_ + i);
        step(Step::kCopy, in(i), r, out(0), whole, r);
      }
      exchange_ = Exchange::kAllGather;
      exchange_in_ = Ref{Ref::kOutput, 0, base};
      exchange_out_ = out(0);
      exchange_in_bytes_ = mine;
      exchange_out_bytes_ = whole_bytes;
      adding_ = &after_;
    } else {
      for (int i = 0; i < local_; ++i) {
        const Region r = in_piece(first_rank_ + i);
        step(Step::kCopy, in(i), r, send(offsets[static_cast<size_t>(first_rank_ + i)] - base), r, r);
      }
      exchange_through_scratch(Exchange::kAllGather, mine, whole_bytes);
      adding_ = &after_;
      for (int k = 0; k < parallel_; ++k)
        step(Step::kCopy, recv(offsets[static_cast<size_t>(k)]), in_piece(k), out(0), whole, in_piece(k));
    }
    return;
  }

  // S(a) -> S(b): all-to-all. To each other node, every (its piece j, this
  // node's piece i) overlap, j-major; between pieces of this node, a copy.
  size_t sent = 0, received = 0;
  for (int m = 0; m < nodes_; ++m) {
    if (m == node) continue;
    adding_ = &before_;
    for (int j = m * local_; j < (m + 1) * local_; ++j)
      for (int i = 0; i < local_; ++i) {
        const Region from = in_piece(first_rank_ + i), box = intersect(from, out_piece(j));
        step(Step::kCopy, in(i), from, send(sent), box, box);
        send_counts_[static_cast<size_t>(m)] += static_cast<size_t>(box.size()) * element_;
        sent += static_cast<size_t>(box.size()) * element_;
      }
    adding_ = &after_;
    for (int j = 0; j < local_; ++j)
      for (int i = m * local_; i < (m + 1) * local_; ++i) {
        const Region target = out_piece(first_rank_ + j), box = intersect(in_piece(i), target);
        step(Step::kCopy, recv(received), box, out(j), target, box);
        recv_counts_[static_cast<size_t>(m)] += static_cast<size_t>(box.size()) * element_;
        received += static_cast<size_t>(box.size()) * element_;
      }
  }
  adding_ = &after_;
  for (int j = 0; j < local_; ++j)
    for (int i = 0; i < local_; ++i) {
      const Region from = in_piece(first_rank_ + i), target = out_piece(first_rank_ + j);
      step(Step::kCopy, in(i), from, out(j), target, intersect(from, target));
    }
  exchange_through_scratch(Exchange::kAllToAll, sent, received);
}

// `across` changes, `within` stays: lane l (device l of every node, or the
// one lane of a `within` B tensor) is converted across nodes on its own, and
// every lane's blocks travel in one collective, lane after lane within each
// node's block. Lane l reads input lane_input(l) and writes output l.
void BoxingBody::plan_lanes() {
  const int node = node_of(first_rank_);
  const int lanes = outputs_;
  auto in = [&](int l) { return Ref{Ref::kInput, lane_input(l), 0}; };
  auto out = [](int l) { return Ref{Ref::kOutput, l, 0}; };
  auto send = [](size_t offset) { return Ref{Ref::kSend, 0, offset}; };
  auto recv = [](size_t offset) { return Ref{Ref::kRecv, 0, offset}; };
  auto rin = [&](int m, int l) { return in_piece(m * local_ + l); };
  auto rout = [&](int m, int l) { return out_piece(m * local_ + l); };
  auto bytes = [&](const Region& r) { return static_cast<size_t>(r.size()) * element_; };
  send_counts_.assign(static_cast<size_t>(nodes_), 0);
  recv_counts_.assign(static_cast<size_t>(nodes_), 0);
  size_t sent = 0, received = 0;
  const Sbp::Kind from = in_.across.kind, to = out_.across.kind;

  if (from == Sbp::kPartialSum && to == Sbp::kBroadcast) {  // all-reduce every lane
    if (lanes == 1) {  // straight from the input into the output
      exchange_ = Exchange::kAllReduce;
      exchange_in_ = in(0);
      exchange_out_ = out(0);
      exchange_in_bytes_ = exchange_out_bytes_ = bytes(rin(node, 0));
      return;
    }
    for (int l = 0; l < lanes; ++l) {
      const Region r = rin(node, l);
      adding_ = &before_;
      step(Step::kCopy, in(l), r, send(sent), r, r);
      adding_ = &after_;
      step(Step::kCopy, recv(sent), r, out(l), rout(node, l), r);
      sent += bytes(r);
    }
    exchange_through_scratch(Exchange::kAllReduce, sent, sent);
    return;
  }

  if (from == Sbp::kPartialSum) {  // to S: every node's block of every lane, reduce-scatter
    for (int m = 0; m < nodes_; ++m)
      for (int l = 0; l < lanes; ++l) {
        const Region r = rout(m, l);
        adding_ = &before_;
        step(Step::kCopy, in(l), rin(node, l), send(sent), r, r);
        if (m == node) {
          adding_ = &after_;
          step(Step::kCopy, recv(received), r, out(l), r, r);
          received += bytes(r);
        }
        recv_counts_[static_cast<size_t>(m)] += static_cast<size_t>(r.size());  // elements
        sent += bytes(r);
      }
    exchange_through_scratch(Exchange::kReduceScatter, sent, received);
    return;
  }

  if (to == Sbp::kBroadcast) {  // from S: every node's pieces of every lane, all-gather
    for (int l = 0; l < lanes; ++l) {
      const Region r = rin(node, l);
      adding_ = &before_;
      step(Step::kCopy, in(l), r, send(sent), r, r);
      sent += bytes(r);
    }
    adding_ = &after_;
    for (int m = 0; m < nodes_; ++m)
      for (int l = 0; l < lanes; ++l) {
        const Region r = rin(m, l), target = rout(node, l);
        step(Step::kCopy, recv(received), r, out(l), target, intersect(r, target));
        send_counts_[static_cast<size_t>(m)] += bytes(r);
        received += bytes(r);
      }
    exchange_through_scratch(Exchange::kAllGather, sent, received);
    return;
  }

  // S(a) -> S(b): all-to-all of the overlaps, lane by lane; a node's own by copy.
  for (int m = 0; m < nodes_; ++m)
    for (int l = 0; l < lanes; ++l) {
      const Region mine = rin(node, l), target = rout(node, l);
      if (m == node) {
        adding_ = &after_;
        step(Step::kCopy, in(l), mine, out(l), target, intersect(mine, target));
        continue;
      }
      const Region to_m = intersect(mine, rout(m, l)), from_m = intersect(rin(m, l), target);
      adding_ = &before_;
      step(Step::kCopy, in(l), mine, send(sent), to_m, to_m);
      adding_ = &after_;
      step(Step::kCopy, recv(received), from_m, out(l), target, from_m);
      send_counts_[static_cast<size_t>(m)] += bytes(to_m);
      recv_counts_[static_cast<size_t>(m)] += bytes(from_m);
      sent += bytes(to_m);
      received += bytes(from_m);
    }
  exchange_through_scratch(Exchange::kAllToAll, sent, received);
}

// The exchange reads `sent` bytes packed in send_ and writes `received` into recv_.
void BoxingBody::exchange_through_scratch(Exchange kind, size_t sent, size_t received) {
  send_.resize(sent);
  recv_.resize(received);
  exchange_ = kind;
  exchange_in_ = Ref{Ref::kSend, 0, 0};
  exchange_out_ = Ref{Ref::kRecv, 0, 0};
  exchange_in_bytes_ = sent;
  exchange_out_bytes_ = received;
}

std::byte* BoxingBody::resolve(const Ref& ref, const ActIo& io) {
  switch (ref.kind) {
    case Ref::kInput: return static_cast<std::byte*>(io.inputs[static_cast<size_t>(ref.index)]->data) + ref.offset;
    case Ref::kOutput: return static_cast<std::byte*>(io.outputs[static_cast<size_t>(ref.index)]->data) + ref.offset;
    case Ref::kSend: return send_.data() + ref.offset;
    case Ref::kRecv: return recv_.data() + ref.offset;
  }
  return nullptr;
}

void BoxingBody::run(const std::vector<Step>& steps, const ActIo& io) {
  for (const Step& s : steps) {
    std::byte* dst = resolve(s.dst, io);
    switch (s.op) {
      case Step::kZero:
        std::memset(dst, 0, static_cast<size_t>(s.dst_region.size()) * element_);
        break;
      case Step::kCopy:
        copy_region(resolve(s.src, io), s.src_region, dst, s.dst_region, s.box, element_);
        break;
      case Step::kAdd:
        visit_dtype(logical_.dtype, [&]<typename T>(std::type_identity<T>) {
          add_rows<T>(resolve(s.src, io), s.src_region, dst, s.dst_region, s.box, op_);
        });
        break;
      case Step::kSum:
        visit_dtype(logical_.dtype, [&]<typename T>(std::type_identity<T>) {
          sum_rows<T>(resolve(s.src, io), resolve(s.src2, io), s.src_region, dst, s.dst_region, s.box, op_);
        });
        break;
    }
  }
}

Status BoxingBody::exchange(const ActIo& io) {
  if (exchange_ == Exchange::kNone) return {};
  if (!collectives_)
    return internal_error("boxing {} -> {} across {} nodes has no collectives", in_.to_string(), out_.to_string(),
                          nodes_);
  if (collectives_->world() != nodes_ || collectives_->rank() != node_of(first_rank_))
    return internal_error("boxing: collectives of rank {} of {}, but this is node {} of {}", collectives_->rank(),
                          collectives_->world(), node_of(first_rank_), nodes_);
  std::byte* in = resolve(exchange_in_, io);
  std::byte* out = resolve(exchange_out_, io);
  // The elements of the logical tensor's dtype, for the reductions.
  auto elements = [&]<typename T>(std::type_identity<T>, std::byte* p, size_t bytes) {
    return std::span<T>(reinterpret_cast<T*>(p), bytes / sizeof(T));
  };
  switch (exchange_) {
    case Exchange::kNone: return {};
    case Exchange::kAllReduce:
      return visit_dtype(logical_.dtype, [&]<typename T>(std::type_identity<T> t) {
        return collectives_->all_reduce(std::span<const T>(elements(t, in, exchange_in_bytes_)),
                                        elements(t, out, exchange_out_bytes_), tag_, op_);
      });
    case Exchange::kReduceScatter:  // recv_counts_: each node's block in elements
      return visit_dtype(logical_.dtype, [&]<typename T>(std::type_identity<T> t) {
        return collectives_->reduce_scatter_v(std::span<const T>(elements(t, in, exchange_in_bytes_)),
                                              elements(t, out, exchange_out_bytes_), recv_counts_, tag_, op_);
      });
    case Exchange::kAllGather:
      return collectives_->all_gather_v({in, exchange_in_bytes_}, {out, exchange_out_bytes_}, send_counts_, tag_);
    case Exchange::kAllToAll:
      return collectives_->all_to_all_v({in, exchange_in_bytes_}, send_counts_, {out, exchange_out_bytes_},
                                        recv_counts_, tag_);
  }
  return {};
}

Status BoxingBody::act(const ActIo& io) {
  if (chain_)
    return internal_error("boxing {} -> {}: no one task does it (the compiler chains it)", in_.to_string(),
                          out_.to_string());
  run(before_, io);
  RILL_RETURN_IF_ERROR(exchange(io));
  run(after_, io);
  return {};
}

std::string BoxingBody::collective() const {
  if (collectives_ == nullptr || *collectives_->last_op() == '\0') return {};
  return fmt::format("{} {}", collectives_->last_op(), collectives_->last_algorithm());
}

}  // namespace rill
