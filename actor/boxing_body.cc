#include <cstring>

#include "actor/body.h"

namespace rill {
namespace {

// dst = a + b over `box`, where a and b both cover src_region.
template <typename T>
void sum_rows(const std::byte* a, const std::byte* b, const Region& src_region, std::byte* dst,
              const Region& dst_region, const Region& box) {
  const T* x = reinterpret_cast<const T*>(a);
  const T* y = reinterpret_cast<const T*>(b);
  T* to = reinterpret_cast<T*>(dst);
  for_each_row(src_region, dst_region, box, [&](int64_t s, int64_t d, int64_t n) {
    const T* __restrict p = x + s;
    const T* __restrict q = y + s;
    T* __restrict r = to + d;
    for (int64_t k = 0; k < n; ++k) r[k] = p[k] + q[k];
  });
}

template <typename T>
void add_rows(const std::byte* src, const Region& src_region, std::byte* dst, const Region& dst_region,
              const Region& box) {
  const T* from = reinterpret_cast<const T*>(src);
  T* to = reinterpret_cast<T*>(dst);
  for_each_row(src_region, dst_region, box, [&](int64_t s, int64_t d, int64_t n) {
    const T* __restrict a = from + s;
    T* __restrict b = to + d;
    for (int64_t k = 0; k < n; ++k) b[k] += a[k];
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

BoxingBody::BoxingBody(Sbp in_sbp, Sbp out_sbp, int parallel, TensorMeta logical, int first_rank, int local_pieces,
                       comm::Collectives* collectives, uint64_t tag)
    : in_(in_sbp),
      out_(out_sbp),
      parallel_(parallel),
      logical_(std::move(logical)),
      element_(dtype_size(logical_.dtype)),
      first_rank_(first_rank),
      local_(local_pieces > 0 ? local_pieces : parallel),
      nodes_(parallel / (local_pieces > 0 ? local_pieces : parallel)),
      outputs_(out_sbp.kind == Sbp::kBroadcast ? 1 : local_),
      collectives_(collectives),
      tag_(tag) {
  if (boxing_exchanges(in_, out_, nodes_)) plan_across_nodes();
  else plan_local();
}

Region BoxingBody::in_piece(int rank) const { return piece_region(logical_.shape, in_, parallel_, rank); }
Region BoxingBody::out_piece(int rank) const { return piece_region(logical_.shape, out_, parallel_, rank); }

void BoxingBody::step(Step::Op op, Ref src, const Region& src_region, Ref dst, const Region& dst_region,
                      const Region& box) {
  step(op, src, src_region, dst, dst_region, box, Ref{});
}

void BoxingBody::step(Step::Op op, Ref src, const Region& src_region, Ref dst, const Region& dst_region,
                      const Region& box, Ref src2) {
  if (op != Step::kZero && box.size() == 0) return;
  adding_->push_back(Step{op, src, src2, dst, src_region, dst_region, box});
}

// dst[box] = the sum of every input (P pieces, each covering `inputs`), in
// input order: the first two in one pass, then one pass per further input.
void BoxingBody::sum_inputs(const Region& inputs, Ref dst, const Region& dst_region, const Region& box) {
  const Ref first{Ref::kInput, 0, 0};
  if (local_ == 1) {
    step(Step::kCopy, first, inputs, dst, dst_region, box);
    return;
  }
  step(Step::kSum, first, inputs, dst, dst_region, box, Ref{Ref::kInput, 1, 0});
  for (int i = 2; i < local_; ++i) step(Step::kAdd, Ref{Ref::kInput, i, 0}, inputs, dst, dst_region, box);
}

// Every conversion that needs no other node: all of them on one node, and
// B -> S, B -> P, S -> P on many (each node has what its pieces need).
void BoxingBody::plan_local() {
  const Region whole = whole_region(logical_.shape);
  auto in = [](int i) { return Ref{Ref::kInput, i, 0}; };
  auto out = [](int j) { return Ref{Ref::kOutput, j, 0}; };
  adding_ = &after_;
  for (int j = 0; j < outputs_; ++j) {
    const int rank = first_rank_ + j;
    const Region target = out_piece(rank);
    switch (in_.kind) {
      case Sbp::kBroadcast:  // to S: slice; to P: rank 0 holds it, the others 0
        if (out_.kind == Sbp::kPartialSum && rank != 0) step(Step::kZero, {}, {}, out(j), whole, whole);
        else step(Step::kCopy, in(0), whole, out(j), target, target);
        break;
      case Sbp::kSplit:
        if (out_.kind == Sbp::kPartialSum) {  // its own piece, zeros around it
          step(Step::kZero, {}, {}, out(j), whole, whole);
          step(Step::kCopy, in(j), in_piece(rank), out(j), whole, in_piece(rank));
        } else {  // to B or S(b): what every piece holds of this one
          for (int i = 0; i < local_; ++i) {
            const Region from = in_piece(first_rank_ + i);
            step(Step::kCopy, in(i), from, out(j), target, intersect(from, target));
          }
        }
        break;
      case Sbp::kPartialSum:  // this piece of the sum of every input
        sum_inputs(whole, out(j), target, target);
        break;
    }
  }
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
  auto packed_offsets = [&](const Sbp& sbp) {
    std::vector<size_t> offsets(static_cast<size_t>(parallel_) + 1, 0);
    for (int k = 0; k < parallel_; ++k)
      offsets[static_cast<size_t>(k) + 1] =
          offsets[static_cast<size_t>(k)] +
          static_cast<size_t>(piece_region(logical_.shape, sbp, parallel_, k).size()) * element_;
    for (int m = 0; m < nodes_; ++m)
      send_counts_[static_cast<size_t>(m)] = offsets[static_cast<size_t>((m + 1) * local_)] -
                                             offsets[static_cast<size_t>(m * local_)];
    return offsets;
  };

  if (in_.kind == Sbp::kPartialSum) {
    if (out_.kind == Sbp::kBroadcast) {  // local sum into output 0; all-reduce it
      sum_inputs(whole, out(0), whole, whole);
      exchange_ = Exchange::kAllReduce;
      exchange_in_ = exchange_out_ = out(0);
      exchange_in_bytes_ = exchange_out_bytes_ = whole_bytes;
      return;
    }
    // P -> S: every rank's piece of the local sum, packed; reduce-scatter
    // leaves this node's pieces of the global sum.
    std::vector<size_t> offsets = packed_offsets(out_);
    send_.resize(whole_bytes);
    for (int k = 0; k < parallel_; ++k) {
      const Region r = out_piece(k);
      sum_inputs(whole, send(offsets[static_cast<size_t>(k)]), r, r);
    }
    const size_t base = offsets[static_cast<size_t>(first_rank_)];
    recv_.resize(send_counts_[static_cast<size_t>(node)]);
    for (size_t m = 0; m < send_counts_.size(); ++m) recv_counts_[m] = send_counts_[m] / element_;  // elements
    exchange_ = Exchange::kReduceScatter;
    exchange_in_ = send(0);
    exchange_out_ = recv(0);
    exchange_in_bytes_ = whole_bytes;
    exchange_out_bytes_ = recv_.size();
    adding_ = &after_;
    for (int j = 0; j < local_; ++j) {
      const Region r = out_piece(first_rank_ + j);
      step(Step::kCopy, recv(offsets[static_cast<size_t>(first_rank_ + j)] - base), r, out(j), r, r);
    }
    return;
  }

  // From S(a).
  if (out_.kind == Sbp::kBroadcast) {  // all-gather
    std::vector<size_t> offsets = packed_offsets(in_);
    const size_t base = offsets[static_cast<size_t>(first_rank_)];
    exchange_ = Exchange::kAllGather;
    exchange_in_bytes_ = send_counts_[static_cast<size_t>(node)];
    exchange_out_bytes_ = whole_bytes;
    if (pieces_contiguous(logical_.shape, in_)) {  // packed order is the layout: gather into output 0
      for (int i = 0; i < local_; ++i) step(Step::kCopy, in(i), in_piece(first_rank_ + i), out(0), whole, in_piece(first_rank_ + i));
      exchange_in_ = Ref{Ref::kOutput, 0, base};
      exchange_out_ = out(0);
      adding_ = &after_;
    } else {
      send_.resize(exchange_in_bytes_);
      recv_.resize(whole_bytes);
      for (int i = 0; i < local_; ++i) {
        const Region r = in_piece(first_rank_ + i);
        step(Step::kCopy, in(i), r, send(offsets[static_cast<size_t>(first_rank_ + i)] - base), r, r);
      }
      exchange_in_ = send(0);
      exchange_out_ = recv(0);
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
  send_.resize(sent);
  recv_.resize(received);
  exchange_ = Exchange::kAllToAll;
  exchange_in_ = send(0);
  exchange_out_ = recv(0);
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
        if (logical_.dtype == DType::kF32) add_rows<float>(resolve(s.src, io), s.src_region, dst, s.dst_region, s.box);
        else add_rows<int32_t>(resolve(s.src, io), s.src_region, dst, s.dst_region, s.box);
        break;
      case Step::kSum:
        if (logical_.dtype == DType::kF32)
          sum_rows<float>(resolve(s.src, io), resolve(s.src2, io), s.src_region, dst, s.dst_region, s.box);
        else sum_rows<int32_t>(resolve(s.src, io), resolve(s.src2, io), s.src_region, dst, s.dst_region, s.box);
        break;
    }
  }
}

Status BoxingBody::exchange(const ActIo& io) {
  if (exchange_ == Exchange::kNone) return {};
  if (!collectives_) return internal_error("boxing {} -> {} across {} nodes has no collectives", in_.to_string(), out_.to_string(), nodes_);
  if (collectives_->world() != nodes_ || collectives_->rank() != node_of(first_rank_))
    return internal_error("boxing: collectives of rank {} of {}, but this is node {} of {}", collectives_->rank(),
                          collectives_->world(), node_of(first_rank_), nodes_);
  std::byte* in = resolve(exchange_in_, io);
  std::byte* out = resolve(exchange_out_, io);
  const bool sums = exchange_ == Exchange::kAllReduce || exchange_ == Exchange::kReduceScatter;
  if (sums && logical_.dtype != DType::kF32)
    return invalid_argument("boxing {} -> {} across nodes sums; sums across nodes are f32 only, and this tensor is {}",
                            in_.to_string(), out_.to_string(), dtype_name(logical_.dtype));
  auto floats = [](std::byte* p, size_t bytes) { return std::span<float>(reinterpret_cast<float*>(p), bytes / 4); };
  switch (exchange_) {
    case Exchange::kNone: return {};
    case Exchange::kAllReduce:
      return collectives_->all_reduce(floats(in, exchange_in_bytes_), floats(out, exchange_out_bytes_), tag_);
    case Exchange::kReduceScatter:  // recv_counts_: each node's block in elements
      return collectives_->reduce_scatter_v(floats(in, exchange_in_bytes_), floats(out, exchange_out_bytes_),
                                            recv_counts_, tag_);
    case Exchange::kAllGather:
      return collectives_->all_gather_v({in, exchange_in_bytes_}, {out, exchange_out_bytes_}, send_counts_, tag_);
    case Exchange::kAllToAll:
      return collectives_->all_to_all_v({in, exchange_in_bytes_}, send_counts_, {out, exchange_out_bytes_},
                                        recv_counts_, tag_);
  }
  return {};
}

Status BoxingBody::act(const ActIo& io) {
  run(before_, io);
  RILL_RETURN_IF_ERROR(exchange(io));
  run(after_, io);
  return {};
}

}  // namespace rill
