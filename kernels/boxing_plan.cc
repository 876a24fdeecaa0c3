#include "kernels/boxing_plan.h"

#include <algorithm>
#include <utility>

#include "kernels/powersgd_layout.h"

namespace rill {
namespace {

using Ref = BoxingPlan::Ref;
using Step = BoxingPlan::Step;
using Exchange = BoxingPlan::Exchange;

// Whether the pieces of an S(axis) tensor lie one after another, in rank
// order, in the whole tensor's row-major layout (every axis before `axis` is 1).
bool pieces_contiguous(const Shape& shape, const Sbp& sbp) {
  for (int i = 0; i < sbp.axis && i < static_cast<int>(shape.size()); ++i)
    if (shape[i] != 1) return false;
  return true;
}


// Fills a plan's steps and exchange; `adding` is where step() appends.
class Planner {
 public:
  explicit Planner(BoxingPlan& plan) : p(plan), adding(&plan.before) {}
  void plan_within_node();
  void plan_local(bool flat);
  void plan_across_nodes();
  void plan_lanes();
  void plan_bucket(const std::vector<TensorMeta>& bucket);
  void step(Step::Op op, Ref src, const Region& src_region, Ref dst, const Region& dst_region, const Region& box);
  void step(Step::Op op, Ref src, const Region& src_region, Ref dst, const Region& dst_region, const Region& box,
            Ref src2);

 private:
  void exchange_through_scratch(Exchange kind, size_t sent, size_t received);
  void convert(Sbp::Kind from, Sbp::Kind to, int only, int slot, const Region& target, bool holder);
  void sum_inputs(const Region& inputs, Ref dst, const Region& dst_region, const Region& box, int base = 0);
  int lane_input(int lane) const { return p.in.within.kind == Sbp::kBroadcast ? 0 : lane; }
  Region in_piece(int rank) const;
  Region out_piece(int rank) const;

  BoxingPlan& p;
  std::vector<Step>* adding;
};

// Tensor k's pieces are inputs k * p.local ...; its sum lands at its offset
// in the send buffer, the all-reduce runs in place, and output k copies its part.
void Planner::plan_bucket(const std::vector<TensorMeta>& bucket) {
  size_t offset = 0;
  for (size_t k = 0; k < bucket.size(); ++k) {
    const Region whole = whole_region(bucket[k].shape);
    const Ref at{Ref::kSend, 0, offset};
    adding = &p.before;
    sum_inputs(whole, at, whole, whole, static_cast<int>(k) * p.local);
    adding = &p.after;
    step(Step::kCopy, at, whole, Ref{Ref::kOutput, static_cast<int>(k), 0}, whole, whole);
    offset += bucket[k].bytes();
  }
  p.send_bytes = offset;
  p.exchange = Exchange::kAllReduce;
  p.exchange_in = p.exchange_out = Ref{Ref::kSend, 0, 0};
  p.exchange_in_bytes = p.exchange_out_bytes = offset;
}

Region Planner::in_piece(int rank) const { return piece_region(p.logical.shape, p.in, p.nodes, p.local, rank); }
Region Planner::out_piece(int rank) const { return piece_region(p.logical.shape, p.out, p.nodes, p.local, rank); }

void Planner::step(Step::Op op, Ref src, const Region& src_region, Ref dst, const Region& dst_region,
                      const Region& box) {
  step(op, src, src_region, dst, dst_region, box, Ref{});
}

void Planner::step(Step::Op op, Ref src, const Region& src_region, Ref dst, const Region& dst_region,
                      const Region& box, Ref src2) {
  if (op != Step::kZero && box.size() == 0) return;
  adding->push_back(Step{op, src, src2, dst, src_region, dst_region, box});
}

// dst[box] = the sum of the node's p.local P pieces, inputs base ... (each
// covering `inputs`), in input order: the first two in one pass, then one
// pass per further input.
void Planner::sum_inputs(const Region& inputs, Ref dst, const Region& dst_region, const Region& box, int base) {
  auto in = [base](int i) { return Ref{Ref::kInput, base + i, 0}; };
  if (p.local == 1) {
    step(Step::kCopy, in(0), inputs, dst, dst_region, box);
    return;
  }
  step(Step::kSum, in(0), inputs, dst, dst_region, box, in(1));
  for (int i = 2; i < p.local; ++i) step(Step::kAdd, in(i), inputs, dst, dst_region, box);
}

// Output slot `slot`, covering `target`, from this node's inputs, turning
// `from` into `to`: input `only`, or all of them when it is -1. B -> P: the
// holder keeps the value, the other pieces are 0.
void Planner::convert(Sbp::Kind from, Sbp::Kind to, int only, int slot, const Region& target, bool holder) {
  auto in = [](int i) { return Ref{Ref::kInput, i, 0}; };
  const Ref dst{Ref::kOutput, slot, 0};
  const int begin = only >= 0 ? only : 0, end = only >= 0 ? only + 1 : p.local;
  switch (from) {
    case Sbp::kBroadcast:  // to S: slice; to P: the holder has it
      if (to == Sbp::kPartialSum && !holder) step(Step::kZero, {}, {}, dst, target, target);
      else step(Step::kCopy, in(begin), in_piece(p.first_rank + begin), dst, target, target);
      break;
    case Sbp::kSplit:  // to P: its own piece, zeros around; else what each piece holds of target
      if (to == Sbp::kPartialSum) step(Step::kZero, {}, {}, dst, target, target);
      for (int i = begin; i < end; ++i) {
        const Region from_region = in_piece(p.first_rank + i);
        step(Step::kCopy, in(i), from_region, dst, target, intersect(from_region, target));
      }
      break;
    case Sbp::kPartialSum:  // this piece of the sum of the inputs
      sum_inputs(in_piece(p.first_rank), dst, target, target);
      break;
  }
}

// Between the devices of each node (one node, or `across` unchanged): the
// node's pieces are all it needs. With p.piece set, only that output piece.
void Planner::plan_within_node() {
  adding = &p.after;
  const Sbp::Kind from = p.in.within.kind, to = p.out.within.kind;
  const int begin = p.piece >= 0 ? p.piece : 0, end = p.piece >= 0 ? p.piece + 1 : p.outputs;
  for (int j = begin; j < end; ++j) {
    const int only = from == Sbp::kBroadcast ? 0 : from == Sbp::kSplit && to == Sbp::kPartialSum ? j : -1;
    convert(from, to, only, j - begin, out_piece(p.first_rank + j), j == 0);
  }
}

// B -> S, B -> P and S -> P across nodes: each node has what its pieces
// need. `flat`: 1-D over all devices (rank 0 holds a B -> P value); else
// lane by lane (node 0 holds it, each lane its own part).
void Planner::plan_local(bool flat) {
  adding = &p.after;
  const Sbp::Kind from = p.in.across.kind, to = p.out.across.kind;
  const int node = p.node_of(p.first_rank);
  for (int j = 0; j < p.outputs; ++j)
    convert(from, to, lane_input(j), j, out_piece(p.first_rank + j), flat ? p.first_rank + j == 0 : node == 0);
}

// Conversions that need the pieces of other nodes. Scratch buffers hold
// regions packed one after another, each row-major (the layout of a piece).
void Planner::plan_across_nodes() {
  const Region whole = whole_region(p.logical.shape);
  const int node = p.node_of(p.first_rank);
  auto in = [](int i) { return Ref{Ref::kInput, i, 0}; };
  auto out = [](int j) { return Ref{Ref::kOutput, j, 0}; };
  auto send = [](size_t offset) { return Ref{Ref::kSend, 0, offset}; };
  auto recv = [](size_t offset) { return Ref{Ref::kRecv, 0, offset}; };
  p.send_counts.assign(static_cast<size_t>(p.nodes), 0);
  p.recv_counts.assign(static_cast<size_t>(p.nodes), 0);
  const size_t whole_bytes = p.logical.bytes();
  // Byte offset of each rank's piece when all pieces are packed in rank order.
  auto packed_offsets = [&](const NdSbp& sbp) {
    std::vector<size_t> offsets(static_cast<size_t>(p.parallel) + 1, 0);
    for (int k = 0; k < p.parallel; ++k)
      offsets[static_cast<size_t>(k) + 1] =
          offsets[static_cast<size_t>(k)] +
          static_cast<size_t>(piece_region(p.logical.shape, sbp, p.nodes, p.local, k).size()) * p.element;
    for (int m = 0; m < p.nodes; ++m)
      p.send_counts[static_cast<size_t>(m)] = offsets[static_cast<size_t>((m + 1) * p.local)] -
                                             offsets[static_cast<size_t>(m * p.local)];
    return offsets;
  };

  if (p.in.across.kind == Sbp::kPartialSum) {
    if (p.out.across.kind == Sbp::kBroadcast) {  // local sum into output 0; all-reduce it
      sum_inputs(whole, out(0), whole, whole);
      p.exchange = Exchange::kAllReduce;
      p.exchange_in = p.exchange_out = out(0);
      p.exchange_in_bytes = p.exchange_out_bytes = whole_bytes;
      return;
    }
    // P -> S: every rank's piece of the local sum, packed; reduce-scatter
    // leaves this node's pieces of the global sum.
    std::vector<size_t> offsets = packed_offsets(p.out);
    for (int k = 0; k < p.parallel; ++k) {
      const Region r = out_piece(k);
      sum_inputs(whole, send(offsets[static_cast<size_t>(k)]), r, r);
    }
    const size_t base = offsets[static_cast<size_t>(p.first_rank)];
    for (size_t m = 0; m < p.send_counts.size(); ++m) p.recv_counts[m] = p.send_counts[m] / p.element;  // elements
    exchange_through_scratch(Exchange::kReduceScatter, whole_bytes, p.send_counts[static_cast<size_t>(node)]);
    adding = &p.after;
    for (int j = 0; j < p.local; ++j) {
      const Region r = out_piece(p.first_rank + j);
      step(Step::kCopy, recv(offsets[static_cast<size_t>(p.first_rank + j)] - base), r, out(j), r, r);
    }
    return;
  }

  // From S(a).
  if (p.out.across.kind == Sbp::kBroadcast) {  // all-gather
    std::vector<size_t> offsets = packed_offsets(p.in);
    const size_t base = offsets[static_cast<size_t>(p.first_rank)];
    const size_t mine = p.send_counts[static_cast<size_t>(node)];
    if (pieces_contiguous(p.logical.shape, p.in.across)) {  // packed order is the layout: gather into output 0
      for (int i = 0; i < p.local; ++i) {
        const Region r = in_piece(p.first_rank + i);
        step(Step::kCopy, in(i), r, out(0), whole, r);
      }
      p.exchange = Exchange::kAllGather;
      p.exchange_in = Ref{Ref::kOutput, 0, base};
      p.exchange_out = out(0);
      p.exchange_in_bytes = mine;
      p.exchange_out_bytes = whole_bytes;
      adding = &p.after;
    } else {
      for (int i = 0; i < p.local; ++i) {
        const Region r = in_piece(p.first_rank + i);
        step(Step::kCopy, in(i), r, send(offsets[static_cast<size_t>(p.first_rank + i)] - base), r, r);
      }
      exchange_through_scratch(Exchange::kAllGather, mine, whole_bytes);
      adding = &p.after;
      for (int k = 0; k < p.parallel; ++k)
        step(Step::kCopy, recv(offsets[static_cast<size_t>(k)]), in_piece(k), out(0), whole, in_piece(k));
    }
    return;
  }

  // S(a) -> S(b): all-to-all. To each other node, every (its piece j, this
  // node's piece i) overlap, j-major; between pieces of this node, a copy.
  size_t sent = 0, received = 0;
  for (int m = 0; m < p.nodes; ++m) {
    if (m == node) continue;
    adding = &p.before;
    for (int j = m * p.local; j < (m + 1) * p.local; ++j)
      for (int i = 0; i < p.local; ++i) {
        const Region from = in_piece(p.first_rank + i), box = intersect(from, out_piece(j));
        step(Step::kCopy, in(i), from, send(sent), box, box);
        p.send_counts[static_cast<size_t>(m)] += static_cast<size_t>(box.size()) * p.element;
        sent += static_cast<size_t>(box.size()) * p.element;
      }
    adding = &p.after;
    for (int j = 0; j < p.local; ++j)
      for (int i = m * p.local; i < (m + 1) * p.local; ++i) {
        const Region target = out_piece(p.first_rank + j), box = intersect(in_piece(i), target);
        step(Step::kCopy, recv(received), box, out(j), target, box);
        p.recv_counts[static_cast<size_t>(m)] += static_cast<size_t>(box.size()) * p.element;
        received += static_cast<size_t>(box.size()) * p.element;
      }
  }
  adding = &p.after;
  for (int j = 0; j < p.local; ++j)
    for (int i = 0; i < p.local; ++i) {
      const Region from = in_piece(p.first_rank + i), target = out_piece(p.first_rank + j);
      step(Step::kCopy, in(i), from, out(j), target, intersect(from, target));
    }
  exchange_through_scratch(Exchange::kAllToAll, sent, received);
}

// `across` changes, `within` stays: lane l (device l of every node, or the
// one lane of a `within` B tensor) is converted across nodes on its own, and
// every lane's blocks travel in one collective, lane after lane within each
// node's block. Lane l reads input lane_input(l) and writes output l.
void Planner::plan_lanes() {
  const int node = p.node_of(p.first_rank);
  const int lanes = p.outputs;
  auto in = [&](int l) { return Ref{Ref::kInput, lane_input(l), 0}; };
  auto out = [](int l) { return Ref{Ref::kOutput, l, 0}; };
  auto send = [](size_t offset) { return Ref{Ref::kSend, 0, offset}; };
  auto recv = [](size_t offset) { return Ref{Ref::kRecv, 0, offset}; };
  auto rin = [&](int m, int l) { return in_piece(m * p.local + l); };
  auto rout = [&](int m, int l) { return out_piece(m * p.local + l); };
  auto bytes = [&](const Region& r) { return static_cast<size_t>(r.size()) * p.element; };
  p.send_counts.assign(static_cast<size_t>(p.nodes), 0);
  p.recv_counts.assign(static_cast<size_t>(p.nodes), 0);
  size_t sent = 0, received = 0;
  const Sbp::Kind from = p.in.across.kind, to = p.out.across.kind;

  if (from == Sbp::kPartialSum && to == Sbp::kBroadcast) {  // all-reduce every lane
    if (lanes == 1) {  // straight from the input into the output
      p.exchange = Exchange::kAllReduce;
      p.exchange_in = in(0);
      p.exchange_out = out(0);
      p.exchange_in_bytes = p.exchange_out_bytes = bytes(rin(node, 0));
      return;
    }
    for (int l = 0; l < lanes; ++l) {
      const Region r = rin(node, l);
      adding = &p.before;
      step(Step::kCopy, in(l), r, send(sent), r, r);
      adding = &p.after;
      step(Step::kCopy, recv(sent), r, out(l), rout(node, l), r);
      sent += bytes(r);
    }
    exchange_through_scratch(Exchange::kAllReduce, sent, sent);
    return;
  }

  if (from == Sbp::kPartialSum) {  // to S: every node's block of every lane, reduce-scatter
    for (int m = 0; m < p.nodes; ++m)
      for (int l = 0; l < lanes; ++l) {
        const Region r = rout(m, l);
        adding = &p.before;
        step(Step::kCopy, in(l), rin(node, l), send(sent), r, r);
        if (m == node) {
          adding = &p.after;
          step(Step::kCopy, recv(received), r, out(l), r, r);
          received += bytes(r);
        }
        p.recv_counts[static_cast<size_t>(m)] += static_cast<size_t>(r.size());  // elements
        sent += bytes(r);
      }
    exchange_through_scratch(Exchange::kReduceScatter, sent, received);
    return;
  }

  if (to == Sbp::kBroadcast) {  // from S: every node's pieces of every lane, all-gather
    for (int l = 0; l < lanes; ++l) {
      const Region r = rin(node, l);
      adding = &p.before;
      step(Step::kCopy, in(l), r, send(sent), r, r);
      sent += bytes(r);
    }
    adding = &p.after;
    for (int m = 0; m < p.nodes; ++m)
      for (int l = 0; l < lanes; ++l) {
        const Region r = rin(m, l), target = rout(node, l);
        step(Step::kCopy, recv(received), r, out(l), target, intersect(r, target));
        p.send_counts[static_cast<size_t>(m)] += bytes(r);
        received += bytes(r);
      }
    exchange_through_scratch(Exchange::kAllGather, sent, received);
    return;
  }

  // S(a) -> S(b): all-to-all of the overlaps, lane by lane; a node's own by copy.
  for (int m = 0; m < p.nodes; ++m)
    for (int l = 0; l < lanes; ++l) {
      const Region mine = rin(node, l), target = rout(node, l);
      if (m == node) {
        adding = &p.after;
        step(Step::kCopy, in(l), mine, out(l), target, intersect(mine, target));
        continue;
      }
      const Region to_m = intersect(mine, rout(m, l)), from_m = intersect(rin(m, l), target);
      adding = &p.before;
      step(Step::kCopy, in(l), mine, send(sent), to_m, to_m);
      adding = &p.after;
      step(Step::kCopy, recv(received), from_m, out(l), target, from_m);
      p.send_counts[static_cast<size_t>(m)] += bytes(to_m);
      p.recv_counts[static_cast<size_t>(m)] += bytes(from_m);
      sent += bytes(to_m);
      received += bytes(from_m);
    }
  exchange_through_scratch(Exchange::kAllToAll, sent, received);
}

// The exchange reads `sent` bytes packed in the send buffer and writes `received` into the receive buffer.
void Planner::exchange_through_scratch(Exchange kind, size_t sent, size_t received) {
  p.send_bytes = sent;
  p.recv_bytes = received;
  p.exchange = kind;
  p.exchange_in = Ref{Ref::kSend, 0, 0};
  p.exchange_out = Ref{Ref::kRecv, 0, 0};
  p.exchange_in_bytes = sent;
  p.exchange_out_bytes = received;
}


}  // namespace

CollectiveCall BoxingPlan::exchange_call() const {
  switch (exchange) {
    case Exchange::kNone: return CollectiveCall::kOther;
    case Exchange::kAllReduce: return CollectiveCall::kAllReduce;
    case Exchange::kAllGather: return CollectiveCall::kAllGather;
    case Exchange::kAllToAll: return CollectiveCall::kAllToAll;
    case Exchange::kReduceScatter: return CollectiveCall::kReduceScatter;
  }
  return CollectiveCall::kOther;
}

size_t BoxingPlan::exchange_scratch_bytes(size_t direct_bytes) const {
  if (exchange == Exchange::kNone) return 0;
  const size_t plain =
      collective_scratch_bytes(exchange_call(), exchange_in_bytes, exchange_in == exchange_out, nodes, direct_bytes);
  if (compress == Compress::kNone) return plain;
  // Compressed steps, and before compress_start the plain all-reduce.
  size_t compressed = 0;  // bf16: an all-to-all and an all-gather, none
  if (compress == Compress::kPowerSgd) {  // two f32 all-reduces in place, of the factors
    const PowerSgdLayout layout = powersgd_layout(tensors, compress_rank);
    compressed = std::max(
        collective_scratch_bytes(CollectiveCall::kAllReduce, layout.first * sizeof(float), true, nodes, direct_bytes),
        collective_scratch_bytes(CollectiveCall::kAllReduce, layout.second * sizeof(float), true, nodes,
                                 direct_bytes));
  }
  return compress_start > 0 ? std::max(plain, compressed) : compressed;
}

BoxingPlan plan_boxing(NdSbp in, NdSbp out, int parallel, TensorMeta logical, int first_rank, int local_pieces,
                       int piece) {
  BoxingPlan p;
  p.in = in;
  p.out = out;
  p.parallel = parallel;
  p.logical = std::move(logical);
  p.element = dtype_size(p.logical.dtype);
  p.first_rank = first_rank;
  p.local = local_pieces > 0 ? local_pieces : parallel;
  p.nodes = parallel / p.local;
  p.outputs = piece >= 0 || out.within.kind == Sbp::kBroadcast ? 1 : p.local;
  p.piece = piece;
  Planner planner(p);
  // The runtime refuses kChain before building a body (no task does it);
  // a plan made anyway has no steps and its act fails.
  switch (boxing_form(p.in, p.out, p.nodes)) {
    case BoxingForm::kWithinNode: planner.plan_within_node(); break;
    case BoxingForm::kFlat:
      boxing_exchanges(p.in, p.out, p.nodes) ? planner.plan_across_nodes() : planner.plan_local(true);
      break;
    case BoxingForm::kLanes: boxing_exchanges(p.in, p.out, p.nodes) ? planner.plan_lanes() : planner.plan_local(false); break;
    case BoxingForm::kChain: p.chain = true; break;
  }
  return p;
}

BoxingPlan plan_boxing_bucket(const std::vector<TensorMeta>& bucket, int parallel, int first_rank, int local_pieces) {
  BoxingPlan p;
  p.in = Sbp::partial_sum();
  p.out = Sbp::broadcast();
  p.parallel = parallel;
  p.logical = bucket.empty() ? TensorMeta{} : bucket[0];
  p.element = dtype_size(DType::kF32);
  p.first_rank = first_rank;
  p.local = local_pieces > 0 ? local_pieces : parallel;
  p.nodes = parallel / p.local;
  p.outputs = static_cast<int>(bucket.size());
  Planner(p).plan_bucket(bucket);
  return p;
}

BoxingPlan plan_boxing_move(TensorMeta logical, const std::vector<Region>& inputs, const Region& output, bool sum) {
  BoxingPlan p;
  p.in = Sbp::broadcast();
  p.out = Sbp::broadcast();
  p.logical = std::move(logical);
  p.element = dtype_size(p.logical.dtype);
  Planner planner(p);
  bool first = true;  // a sum starts from a copy (inputs of a sum cover the output alike)
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Region box = intersect(inputs[k], output);
    if (box.size() == 0) continue;
    planner.step(sum && !first ? Step::kAdd : Step::kCopy, Ref{Ref::kInput, static_cast<int>(k), 0}, inputs[k],
                 Ref{Ref::kOutput, 0, 0}, output, box);
    first = false;
  }
  return p;
}

}  // namespace rill
