#include "compiler/boxing.h"

#include <string>

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

const char* boxing_collective(const Sbp& from, const Sbp& to, int num_nodes) {
  if (!boxing_exchanges(from, to, num_nodes)) return "local";
  if (from.kind == Sbp::kPartialSum) return to.kind == Sbp::kBroadcast ? "all_reduce" : "reduce_scatter";
  return to.kind == Sbp::kBroadcast ? "all_gather" : "all_to_all";
}

int64_t boxing_bytes_sent(const Sbp& from, const Sbp& to, int64_t bytes, int num_nodes) {
  if (!boxing_exchanges(from, to, num_nodes)) return 0;
  const int64_t n = num_nodes;
  const std::string kind = boxing_collective(from, to, num_nodes);
  if (kind == "all_reduce") return 2 * (n - 1) * bytes / n;
  if (kind == "all_to_all") return (n - 1) * bytes / (n * n);
  return (n - 1) * bytes / n;
}

namespace {

class Inserter {
 public:
  explicit Inserter(LogicalGraph* g) : g_(g) {}

  // The boxing node turning `tensor` into `to`, or -1 when none is needed.
  int need(const std::string& tensor, const Sbp& to) {
    const LogicalTensor* t = g_->find(tensor);
    if (t->sbp == to) return -1;
    auto key = std::make_pair(tensor, to.to_string());
    auto it = index_.find(key);
    if (it != index_.end()) return it->second;
    int id = static_cast<int>(g_->boxings.size());
    g_->boxings.push_back({tensor, t->sbp, to});
    index_[key] = id;
    return id;
  }

 private:
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
  for (Reported& r : g->reported) {
    r.boxing = -1;
    if (single || g->find(r.tensor)->sbp.kind != Sbp::kSplit) continue;
    r.boxing = inserter.need(r.tensor, Sbp::broadcast());
  }
  return {};
}

}  // namespace rill::compiler
