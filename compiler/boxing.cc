#include "compiler/boxing.h"

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

namespace {

class Inserter {
 public:
  explicit Inserter(LogicalGraph* g) : g_(g) {}

  // The boxing node turning `tensor` into `to` (the last of a chain), or -1
  // when none is needed. Chains share their steps: one node per (tensor, SBP).
  int need(const std::string& tensor, const NdSbp& to) {
    const LogicalTensor* t = g_->find(tensor);
    int last = -1;
    for (const auto& [in, out] : shared_sums(t->meta, boxing_steps(t->sbp, to, g_->cluster.num_nodes,
                                                                    g_->cluster.devices_per_node))) {
      auto key = std::make_pair(tensor, out.to_string());
      auto it = index_.find(key);
      if (it != index_.end()) {
        last = it->second;
        continue;
      }
      const int id = static_cast<int>(g_->boxings.size());
      g_->boxings.push_back({tensor, in, out, last});
      index_[key] = id;
      last = id;
    }
    return last;
  }

 private:
  // On CPU devices a sum within a node into B (P -> B within) runs as
  // P -> S(k), one task per device summing its slice, then S(k) -> B: the
  // node's device threads share the sums (k: the first axis of at least one
  // element per device).
  std::vector<std::pair<NdSbp, NdSbp>> shared_sums(const TensorMeta& meta,
                                                    std::vector<std::pair<NdSbp, NdSbp>> steps) const {
    const Cluster& c = g_->cluster;
    if (c.devices_per_node < 2 || c.device_type != DeviceType::kCpu) return steps;
    std::vector<std::pair<NdSbp, NdSbp>> out;
    for (const auto& [in, to] : steps) {
      int axis = -1;
      if (boxing_form(in, to, c.num_nodes) == BoxingForm::kWithinNode && in.within.kind == Sbp::kPartialSum &&
          to.within.kind == Sbp::kBroadcast) {
        const Region part = node_region(meta.shape, in, c.num_nodes, c.num_nodes - 1);  // the smallest part
        for (size_t a = 0; a < part.extent.size() && axis < 0; ++a)
          if (part.extent[a] >= c.devices_per_node) axis = static_cast<int>(a);
      }
      if (axis < 0) {
        out.push_back({in, to});
        continue;
      }
      const NdSbp mid = canonical(NdSbp(in.across, Sbp::split(axis)), c.num_nodes, c.devices_per_node);
      out.push_back({in, mid});
      out.push_back({mid, to});
    }
    return out;
  }

  LogicalGraph* g_;
  std::map<std::pair<std::string, std::string>, int> index_;
};

}  // namespace

Status insert_boxing(LogicalGraph* g) {
  g->boxings.clear();
  const bool single = g->parallel() == 1;
  Inserter inserter(g);
  for (OpNode& op : g->ops) {
    op.input_boxing.assign(op.inputs.size(), -1);
    if (single) continue;
    for (size_t k = 0; k < op.inputs.size(); ++k) op.input_boxing[k] = inserter.need(op.inputs[k], op.input_sbp[k]);
  }
  for (VariableNode& v : g->variables) {
    v.grad_boxing = -1;
    if (single || v.grad.empty()) continue;
    v.grad_boxing = inserter.need(v.grad, v.sbp);
  }
  for (Reported& f : g->fetched) {  // the sink reads one whole piece
    f.boxing = -1;
    if (!single) f.boxing = inserter.need(f.tensor, Sbp::broadcast());
  }
  for (Reported& r : g->reported) {
    r.boxing = -1;
    // The sink adds up P pieces and reads one B piece per node; anything
    // else (a split, or a 2-D mix) is made B first.
    const NdSbp& sbp = g->find(r.tensor)->sbp;
    if (single || (sbp.flat() && sbp.across.kind != Sbp::kSplit)) continue;
    r.boxing = inserter.need(r.tensor, Sbp::broadcast());
  }
  return {};
}

}  // namespace rill::compiler
