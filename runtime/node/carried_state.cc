#include "runtime/node/carried_state.h"

#include <fmt/format.h>

#include "compiler/boxing_task.h"
#include "kernels/powersgd_layout.h"
#include "runtime/node/plan_reader.h"

namespace rill {

StatusOr<std::vector<CarriedPiece>> carried_pieces(const plan::Plan& plan, const plan::Task& task) {
  std::vector<CarriedPiece> out;
  if (task.kind() != plan::TaskKind::Boxing || !task.boxing() || task.boxing()->compress() == 0) return out;
  RILL_ASSIGN_OR_RETURN(compiler::BoxingTask work, compiler::boxing_task(plan, task));
  const BoxingPlan& p = work.plan;
  if (p.compress == BoxingPlan::Compress::kNone) return out;
  size_t error = p.exchange_in_bytes / sizeof(float), q = 0;
  if (p.compress == BoxingPlan::Compress::kPowerSgd) {
    const PowerSgdLayout layout = powersgd_layout(p.tensors, p.compress_rank);
    error = layout.error;
    q = layout.second;
  }
  std::string boxing = read_string(task.name());
  if (const size_t at = boxing.rfind('@'); at != std::string::npos) boxing.resize(at);
  const std::string base = std::string(kCarriedPrefix) + boxing;
  const int64_t nodes = p.nodes, node = p.node_of(p.first_rank);
  const auto n = static_cast<int64_t>(error), m = static_cast<int64_t>(q);
  // Named by kind: a checkpoint of one kind never restores another's. The
  // plan's compress values are train.compression's (plan.fbs).
  const std::string kind(graph::ModeWords<graph::Compression>::words[static_cast<size_t>(p.compress)]);
  if (n > 0) out.push_back({base + "/" + kind + "_error", {nodes, n}, {node, 0}, {1, n}, false, true});
  if (m > 0) out.push_back({base + "/" + kind + "_q", {m}, {0}, {m}, true, node == 0});
  return out;
}

bool carried_of(std::string_view name, graph::Compression compression) {
  if (!name.starts_with(kCarriedPrefix) || compression == graph::Compression::kNone) return false;
  const std::string kind(graph::ModeWords<graph::Compression>::words[static_cast<size_t>(compression)]);
  const std::string_view last = name.substr(name.rfind('/') + 1);
  return last == kind + "_error" || (compression == graph::Compression::kPowerSGD && last == kind + "_q");
}

std::vector<float> carried_values(const CarriedPiece& piece, const BoxingBody::Carried& carried) {
  const std::span<const float> from = piece.q ? carried.q : carried.error;
  return {from.begin(), from.end()};
}

std::map<std::string, std::vector<float>> carried_for_node(
    const std::map<std::string, std::pair<Shape, std::vector<float>>>& checkpoint, int node, int nodes) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, tensor] : checkpoint) {
    const auto& [shape, values] = tensor;
    if (name.ends_with("_q") && shape.size() == 1) {
      out[name] = values;
    } else if (name.ends_with("_error") && shape.size() == 2 && shape[0] == nodes && node < nodes &&
               static_cast<int64_t>(values.size()) == shape[0] * shape[1]) {
      const auto row = values.begin() + node * shape[1];
      out[name].assign(row, row + shape[1]);
    }
  }
  return out;
}

std::string restore_carried(BoxingBody& body, const std::vector<CarriedPiece>& pieces,
                            const std::map<std::string, std::vector<float>>& state, int64_t steps_done) {
  const BoxingBody::Carried now = body.carried();
  std::span<const float> error, q;
  std::string left;
  bool found = false;
  for (const CarriedPiece& piece : pieces) {
    auto it = state.find(piece.name);
    if (it == state.end()) continue;
    found = true;
    // This node's row of the error, Q whole (carried_for_node).
    const size_t want = static_cast<size_t>(num_elements(piece.shape));
    if (it->second.size() != want) {
      left += fmt::format("{}{} holds {} values, this plan's {}", left.empty() ? "" : "; ", piece.name,
                          it->second.size(), want);
      continue;
    }
    (piece.q ? q : error) = it->second;
  }
  if (!found) return {};
  // Q alone (a node that comes back to a live job; a checkpoint of another
  // node count): this node has no error of its own to carry yet.
  std::vector<float> zeros;
  if (left.empty() && error.empty() && !now.error.empty() && !q.empty()) {
    zeros.assign(now.error.size(), 0.0f);
    error = zeros;
  }
  if (left.empty() && (error.size() != now.error.size() || q.size() != now.q.size()))
    left = fmt::format("{}: the checkpoint holds only part of it", pieces[0].name.substr(0, pieces[0].name.rfind('/')));
  if (!left.empty()) return left;
  const Status restored = body.restore(error, q, steps_done);
  return restored.ok() ? std::string() : restored.message();
}

}  // namespace rill
