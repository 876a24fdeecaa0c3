#include "compiler/boxing.h"

#include <tuple>

#include "kernels/ops/ops.h"

namespace rill::compiler {

int64_t boxing_cost(const Sbp& from, const Sbp& to, size_t bytes, int parallel) {
  if (parallel <= 1 || from == to) return 0;
  const int64_t whole = static_cast<int64_t>(bytes);
  const int64_t p = parallel;
  int64_t moved = 0;
  if (from.kind == Sbp::kPartialSum) {
    moved = to.kind == Sbp::kBroadcast ? 2 * (p - 1) * whole   // all-reduce
                                       : (p - 1) * whole;      // reduce-scatter, or reduce to rank 0
  } else if (from.kind == Sbp::kSplit) {
    moved = to.kind == Sbp::kSplit ? (p - 1) * whole / p       // all-to-all
                                   : (p - 1) * whole;          // all-gather (then zero for P)
  }  // from B: slicing or zeroing is local
  int64_t written = to.kind == Sbp::kSplit ? whole / p : whole;
  return moved + written;
}

int64_t boxing_cost(const NdSbp& from, const NdSbp& to, size_t bytes, int nodes, int per_node) {
  int64_t cost = 0;
  for (const auto& [in, out] : boxing_steps(from, to, nodes, per_node)) {
    switch (boxing_form(in, out, nodes)) {
      case BoxingForm::kFlat:
        cost += boxing_cost(in.across, out.across, bytes, nodes * per_node);
        break;
      case BoxingForm::kWithinNode: {
        if (nodes <= 1) {
          cost += boxing_cost(in.within, out.within, bytes, per_node);
          break;
        }
        const size_t node_bytes = in.across.kind == Sbp::kSplit ? bytes / static_cast<size_t>(nodes) : bytes;
        cost += nodes * boxing_cost(in.within, out.within, node_bytes, per_node);
        break;
      }
      case BoxingForm::kLanes:
      case BoxingForm::kChain: {  // (boxing_steps never gives a chain step)
        const int lanes = in.within.kind == Sbp::kBroadcast ? 1 : per_node;
        const size_t lane_bytes = in.within.kind == Sbp::kSplit ? bytes / static_cast<size_t>(per_node) : bytes;
        cost += lanes * boxing_cost(in.across, out.across, lane_bytes, nodes);
        break;
      }
    }
  }
  return cost;
}

const char* boxing_collective(const NdSbp& from, const NdSbp& to, int num_nodes) {
  if (!boxing_exchanges(from, to, num_nodes)) return "local";
  if (from.across.kind == Sbp::kPartialSum) return to.across.kind == Sbp::kBroadcast ? "all_reduce" : "reduce_scatter";
  return to.across.kind == Sbp::kBroadcast ? "all_gather" : "all_to_all";
}

int64_t boxing_bytes_sent(const NdSbp& from, const NdSbp& to, int64_t bytes, int num_nodes, int per_node) {
  if (!boxing_exchanges(from, to, num_nodes)) return 0;
  const int64_t n = num_nodes;
  // Lanes of partial sums each carry the whole tensor; split or B lanes together carry it once.
  const bool partial_lanes =
      boxing_form(from, to, num_nodes) == BoxingForm::kLanes && from.within.kind == Sbp::kPartialSum;
  const int64_t carried = partial_lanes ? bytes * per_node : bytes;
  const bool sums = from.across.kind == Sbp::kPartialSum;
  const bool to_b = to.across.kind == Sbp::kBroadcast;
  if (sums && to_b) return 2 * (n - 1) * carried / n;   // all-reduce
  if (!sums && !to_b) return (n - 1) * carried / (n * n);  // all-to-all
  return (n - 1) * carried / n;                            // reduce-scatter, all-gather
}

NdSbp settled(const NdSbp& sbp, const TensorMeta& meta, const graph::Placement& p) {
  if (p.parallel() == 1) return Sbp::broadcast();  // one piece: the whole value, sums included
  if (!sbp.has(Sbp::kPartialSum)) return sbp;
  const bool rows = !meta.shape.empty() && meta.shape[0] >= p.parallel();
  return canonical(NdSbp(rows ? Sbp::split(0) : Sbp::broadcast()), p.num_nodes(), p.per_node());
}

NdSbp arrived(const NdSbp& sbp, const graph::Placement& p) {
  if (p.parallel() == 1) return Sbp::broadcast();
  auto values = [](const Sbp& s) { return s.kind == Sbp::kPartialSum ? Sbp::broadcast() : s; };
  return canonical(NdSbp(values(sbp.across), values(sbp.within)), p.num_nodes(), p.per_node());
}

int64_t move_cost(const NdSbp& from, const graph::Placement& a, const NdSbp& to, const graph::Placement& b,
                  const TensorMeta& meta) {
  int64_t cost = a.parallel() == 1
                     ? 0
                     : boxing_cost(from, settled(from, meta, a), meta.bytes(), a.num_nodes(), a.per_node());
  // The pieces written on `b` hold the tensor once per replica: splits
  // partition it, each B axis copies it (canonical: a trivial axis is moot).
  const NdSbp target = arrived(to, b);
  const int64_t replicas = (target.across.kind == Sbp::kBroadcast ? b.num_nodes() : 1) *
                           (target.within.kind == Sbp::kBroadcast ? b.per_node() : 1);
  return cost + replicas * static_cast<int64_t>(meta.bytes());
}

namespace {

class Inserter {
 public:
  explicit Inserter(LogicalGraph* g) : g_(g) {}

  // The boxing node that makes `tensor` `to` on placement `where` (the last
  // of a chain), or -1 when none is needed. Steps are shared: one node per
  // (tensor, SBP, placement).
  // The boxing that makes collective op `op`'s input what it reads: the
  // ranks' pieces each taken whole as a part of a sum (P) or as rows of a
  // concatenation (S(0)), then made op.input_sbp. -1 on one device.
  int collective(const OpNode& op) {
    const LogicalTensor* t = g_->find(op.inputs[0]);
    const TensorMeta& out = g_->find(op.outputs[0])->meta;
    const graph::Placement& p = g_->placement(op.placement);
    const bool gathers = op.type == "all_gather";
    const NdSbp in = canonical(NdSbp(gathers ? Sbp::split(0) : Sbp::partial_sum()), p.num_nodes(), p.per_node());
    // all_gather: the gathered tensor; else one rank's value (what reduce_scatter's blocks split).
    const TensorMeta as = gathers ? out : *t->local;
    const int code = collective_reduce_code(op.attrs.get_string("reduce", "sum"));  // checked by its inference
    return chain(op.inputs[0], in, -1, op.input_sbp[0], op.placement, as, static_cast<uint8_t>(code));
  }

  int need(const std::string& tensor, const NdSbp& to, int where) {
    const LogicalTensor* t = g_->find(tensor);
    if (t->placement == where) return chain(tensor, t->sbp, -1, to, where);
    const graph::Placement& a = g_->placement(t->placement);
    const graph::Placement& b = g_->placement(where);
    const NdSbp from = g_->sum_moved_partials ? t->sbp : settled(t->sbp, t->meta, a);
    int last = chain(tensor, t->sbp, -1, from, t->placement);
    const NdSbp landed = arrived(to, b);
    last = add(tensor, from, landed, last, t->placement, where);
    return chain(tensor, landed, last, to, where);
  }

 private:
  // The boxing `in` -> `out` of `tensor` reading `from`, from `placement`
  // to `where` (a move when they differ); shared by key.
  int add(const std::string& tensor, const NdSbp& in, const NdSbp& out, int from, int placement, int where,
          const std::optional<TensorMeta>& as = std::nullopt, uint8_t reduce_op = 0) {
    // A collective's boxings are its own: the pieces read as another tensor.
    const std::string reading =
        as ? fmt::format("{} as {} by {}", shape_string(as->shape), in.to_string(), reduce_op) : "";
    auto key = std::make_tuple(tensor, out.to_string(), where, reading);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second;
    const int id = static_cast<int>(g_->boxings.size());
    g_->boxings.push_back({tensor, in, out, from, placement, where, as, reduce_op});
    index_[key] = id;
    return id;
  }

  // `tensor`, made `from_sbp` on `where` by boxing `from` (-1: its
  // producer), made `to` there one step at a time.
  // `as`: the pieces read as that tensor (a collective's input).
  int chain(const std::string& tensor, const NdSbp& from_sbp, int from, const NdSbp& to, int where,
            const std::optional<TensorMeta>& as = std::nullopt, uint8_t reduce_op = 0) {
    const graph::Placement& p = g_->placement(where);
    if (p.parallel() == 1 || from_sbp == to) return from;
    int last = from;
    const TensorMeta& meta = as ? *as : g_->find(tensor)->meta;
    // (A collective op's pieces, read as another tensor, are not sliced first.)
    std::vector<std::pair<NdSbp, NdSbp>> steps = boxing_steps(from_sbp, to, p.num_nodes(), p.per_node());
    if (!as) steps = lanes_in_parts(meta, std::move(steps), p);
    for (const auto& [in, out] : shared_sums(meta, std::move(steps), p))
      last = add(tensor, in, out, last, where, where, as, reduce_op);
    return last;
  }

  // Under train.nccl, a conversion across nodes of a tensor every device of
  // a node holds whole ((X, B) -> (Y, B)) would run the same collective in
  // every lane, each device sending the whole tensor across. Instead each
  // device takes its slice of axis k ((X, B) -> (X, S(k)), from its own
  // piece), each lane converts its slice ((X, S(k)) -> (Y, S(k))), and each
  // node gathers the slices ((Y, S(k)) -> (Y, B)): a node sends the tensor
  // across once, as a host boxing's one lane does (k: the first axis that
  // neither X nor Y splits, with a slice for every device).
  std::vector<std::pair<NdSbp, NdSbp>> lanes_in_parts(const TensorMeta& meta,
                                                      std::vector<std::pair<NdSbp, NdSbp>> steps,
                                                      const graph::Placement& p) const {
    const int nodes = p.num_nodes(), per_node = p.per_node();
    if (!g_->nccl || nodes < 2 || per_node < 2) return steps;
    std::vector<std::pair<NdSbp, NdSbp>> out;
    for (const auto& [in, to] : steps) {
      const Sbp x = in.across, y = to.across;
      const bool whole = in.within.kind == Sbp::kBroadcast && to.within.kind == Sbp::kBroadcast;
      const bool exchanges = x.kind != Sbp::kBroadcast && y.kind != Sbp::kPartialSum && !(x == y);
      int axis = -1;
      for (size_t a = 0; whole && exchanges && a < meta.shape.size() && axis < 0; ++a) {
        const int k = static_cast<int>(a);
        if (meta.shape[a] >= per_node && !(x.kind == Sbp::kSplit && x.axis == k) &&
            !(y.kind == Sbp::kSplit && y.axis == k))
          axis = k;
      }
      if (axis < 0) {
        out.push_back({in, to});
        continue;
      }
      const NdSbp sliced(x, Sbp::split(axis)), converted(y, Sbp::split(axis));
      out.push_back({in, sliced});
      out.push_back({sliced, converted});
      out.push_back({converted, to});
    }
    return out;
  }

  // On CPU devices a sum within a node into B (P -> B within) runs as
  // P -> S(k), one task per device summing its slice, then S(k) -> B: the
  // node's device threads share the sums (k: the first axis of at least one
  // element per device). Not a whole P -> B under train.nccl: that is one
  // device collective (physical_boxing.cc).
  std::vector<std::pair<NdSbp, NdSbp>> shared_sums(const TensorMeta& meta, std::vector<std::pair<NdSbp, NdSbp>> steps,
                                                    const graph::Placement& p) const {
    const int nodes = p.num_nodes(), per_node = p.per_node();
    if (per_node < 2 || p.type != DeviceType::kCpu) return steps;
    std::vector<std::pair<NdSbp, NdSbp>> out;
    for (const auto& [in, to] : steps) {
      int axis = -1;
      const bool device_collective = g_->nccl && in == NdSbp(Sbp::partial_sum()) && to == NdSbp(Sbp::broadcast());
      if (!device_collective && boxing_form(in, to, nodes) == BoxingForm::kWithinNode && in.within.kind == Sbp::kPartialSum &&
          to.within.kind == Sbp::kBroadcast) {
        const Region part = node_region(meta.shape, in, nodes, nodes - 1);  // the smallest part
        for (size_t a = 0; a < part.extent.size() && axis < 0; ++a)
          if (part.extent[a] >= per_node) axis = static_cast<int>(a);
      }
      if (axis < 0) {
        out.push_back({in, to});
        continue;
      }
      const NdSbp mid = canonical(NdSbp(in.across, Sbp::split(axis)), nodes, per_node);
      out.push_back({in, mid});
      out.push_back({mid, to});
    }
    return out;
  }

  LogicalGraph* g_;
  // (tensor, SBP made, placement, how a collective reads the pieces) -> boxing
  std::map<std::tuple<std::string, std::string, int, std::string>, int> index_;
};

}  // namespace

Status insert_boxing(LogicalGraph* g) {
  g->boxings.clear();
  Inserter inserter(g);
  for (OpNode& op : g->ops) {
    op.input_boxing.assign(op.inputs.size(), -1);
    if (op.def->role == OpRole::kCollective) {
      op.input_boxing[0] = inserter.collective(op);
      continue;
    }
    for (size_t k = 0; k < op.inputs.size(); ++k)
      op.input_boxing[k] = inserter.need(op.inputs[k], op.input_sbp[k], op.placement);
  }
  for (VariableNode& v : g->variables) {
    v.grad_boxing = -1;
    if (!v.grad.empty()) v.grad_boxing = inserter.need(v.grad, v.sbp, v.placement);
    v.gate_boxing = -1;
    if (!v.gate.empty()) v.gate_boxing = inserter.need(v.gate, Sbp::broadcast(), v.placement);
  }
  for (Reported& f : g->fetched)  // the sink reads one whole piece (mirrored: each rank's own, as it is)
    f.boxing = g->mirrored ? -1 : inserter.need(f.tensor, Sbp::broadcast(), g->find(f.tensor)->placement);
  for (Reported& r : g->reported) {
    // The sink adds up P pieces and reads one B piece per node; anything
    // else (a split, or a 2-D mix) is made B first.
    const LogicalTensor* t = g->find(r.tensor);
    const bool as_is = t->sbp.flat() && t->sbp.across.kind != Sbp::kSplit;
    r.boxing = as_is ? -1 : inserter.need(r.tensor, Sbp::broadcast(), t->placement);
  }
  return {};
}

}  // namespace rill::compiler
