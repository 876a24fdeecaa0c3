#include "compiler/sbp_deduction.h"

#include <algorithm>

#include "compiler/boxing.h"

namespace rill::compiler {
namespace {

bool fits(const Sbp& sbp, const TensorMeta& meta) {
  return sbp.kind != Sbp::kSplit || (sbp.axis >= 0 && sbp.axis < static_cast<int>(meta.shape.size()));
}

// A signature per tensor over the hierarchy [nodes, devices per node].
struct NdSignature {
  std::vector<NdSbp> inputs;
  std::vector<NdSbp> outputs;
  bool ring = false;  // made of an OpDef::ring_sbp signature (compiler/ring_expansion.h)
  bool operator==(const NdSignature&) const = default;
};

// A signature offered to deduction: the kernel's own, or a ring's.
struct Offered {
  SbpSignature sig;
  bool ring = false;
};

// Whether every input of `sig` lies alike, and every output (a ring's
// signature pairs with such a one on the other axis of a 2-D placement,
// so that each rank's pieces of its inputs cover one place of the ring).
bool uniform(const SbpSignature& sig) {
  auto same = [](const std::vector<Sbp>& v) {
    return std::all_of(v.begin(), v.end(), [&](const Sbp& s) { return s == v[0]; });
  };
  return same(sig.inputs) && same(sig.outputs);
}

// For an op whose kernel copies its input's bytes as they lie (reshape):
// whether every device's input piece holds as many elements as its output
// piece, so that they are the same elements. A split that cuts the output's
// axis unevenly where the input's is cut evenly does not (4 heads of 32
// channels split 3 ways: 43 channels in, 2 heads out).
bool pieces_line_up(const NdSignature& sig, const graph::Placement& p, const Shape& in, const Shape& out) {
  for (int rank = 0; rank < p.parallel(); ++rank)
    if (piece_region(in, sig.inputs[0], p.num_nodes(), p.per_node(), rank).size() !=
        piece_region(out, sig.outputs[0], p.num_nodes(), p.per_node(), rank).size())
      return false;
  return true;
}

std::string signature_string(const NdSignature& sig) {
  std::vector<std::string> in, out;
  for (const NdSbp& s : sig.inputs) in.push_back(s.to_string());
  for (const NdSbp& s : sig.outputs) out.push_back(s.to_string());
  return fmt::format("({}) -> ({})", fmt::join(in, ", "), fmt::join(out, ", "));
}

std::string signature_string(const SbpSignature& sig) {
  return signature_string(
      NdSignature{{sig.inputs.begin(), sig.inputs.end()}, {sig.outputs.begin(), sig.outputs.end()}});
}

// The 2-D signature that runs `across` between nodes and `within` inside
// each, written canonically for placement `p`.
NdSignature combine(const SbpSignature& across, const SbpSignature& within, const graph::Placement& p) {
  NdSignature sig;
  for (size_t k = 0; k < across.inputs.size(); ++k)
    sig.inputs.push_back(canonical(NdSbp(across.inputs[k], within.inputs[k]), p.num_nodes(), p.per_node()));
  for (size_t k = 0; k < across.outputs.size(); ++k)
    sig.outputs.push_back(canonical(NdSbp(across.outputs[k], within.outputs[k]), p.num_nodes(), p.per_node()));
  return sig;
}

// The signatures `op` may use: well-formed for its tensors, all-B if none;
// a ring's (OpDef::ring_sbp) after the kernel's own.
StatusOr<std::vector<Offered>> candidates(const LogicalGraph& g, const OpNode& op) {
  std::vector<TensorMeta> in_metas, out_metas;
  for (const std::string& in : op.inputs) in_metas.push_back(g.find(in)->meta);
  for (const std::string& out : op.outputs) out_metas.push_back(g.find(out)->meta);
  std::vector<Offered> offered;
  if (op.def->sbp != nullptr)
    for (SbpSignature& sig : op.def->sbp(op.attrs, in_metas)) offered.push_back({std::move(sig), false});
  if (op.def->ring_sbp != nullptr && !g.mirrored)  // the mirrored view's ranks hold their own sequences
    for (SbpSignature& sig : op.def->ring_sbp(op.attrs, in_metas)) offered.push_back({std::move(sig), true});
  std::vector<Offered> valid;
  for (const Offered& o : offered) {
    const SbpSignature& sig = o.sig;
    if (sig.inputs.size() != in_metas.size() || sig.outputs.size() != out_metas.size())
      return internal_error("op type '{}' offers SBP signature {} for {} inputs and {} outputs", op.type,
                            signature_string(sig), in_metas.size(), out_metas.size());
    bool ok = true;
    for (size_t k = 0; k < in_metas.size(); ++k) ok = ok && fits(sig.inputs[k], in_metas[k]);
    for (size_t k = 0; k < out_metas.size(); ++k) ok = ok && fits(sig.outputs[k], out_metas[k]);
    if (ok) valid.push_back(o);
  }
  // Every device computing the whole op is right for any op.
  if (valid.empty())
    valid.push_back({{std::vector<Sbp>(in_metas.size(), Sbp::broadcast()),
                      std::vector<Sbp>(out_metas.size(), Sbp::broadcast())}});
  return valid;
}

// 1-D jobs use each signature on both axes; a job with a 2-D hint tries
// every pair (one signature between nodes, one within), as OneFlow does: on
// the job's devices when any hint is 2-D, on a placed op's when its
// placement is 2-D. A ring's pairs with itself or a uniform signature.
std::vector<NdSignature> nd_candidates(const LogicalGraph& g, const OpNode& op, const std::vector<Offered>& sigs) {
  const graph::Placement& p = g.placement(op.placement);
  const bool two_d = op.placement == 0 ? g.two_d : p.two_d;
  std::vector<NdSignature> out;
  for (const Offered& across : sigs)
    for (const Offered& within : sigs) {
      if (!two_d && !(across.sig == within.sig)) continue;
      if ((across.ring && !within.ring && !uniform(within.sig)) ||
          (within.ring && !across.ring && !uniform(across.sig)))
        continue;
      NdSignature sig = combine(across.sig, within.sig, p);
      sig.ring = across.ring || within.ring;
      if (std::find(out.begin(), out.end(), sig) == out.end()) out.push_back(std::move(sig));
    }
  // The kernel's own first, so that a tie keeps them in 2-D too.
  std::stable_partition(out.begin(), out.end(), [](const NdSignature& sig) { return !sig.ring; });
  return out;
}

// A ring reads its inputs as they lie, each device's piece of the keys as
// long as its queries' (compiler/ring_expansion.h): a ring signature is
// kept only where every input already lies so on the op's placement, and
// the sequence (of the queries and of the keys alike) is cut evenly; else
// the kernel's own signatures serve (the keys gathered).
bool ring_fits(const LogicalGraph& g, const OpNode& op, const NdSignature& sig) {
  for (size_t k = 0; k < op.inputs.size(); ++k) {
    const LogicalTensor* t = g.find(op.inputs[k]);
    if (t->placement != op.placement || !(t->sbp == sig.inputs[k])) return false;
  }
  const graph::Placement& p = g.placement(op.placement);
  const Shape& q = g.find(op.inputs[0])->meta.shape;
  const Shape& k = g.find(op.inputs[1])->meta.shape;
  const size_t axis = q.size() - 2;
  const int64_t cut = piece_region(q, sig.inputs[0], p.num_nodes(), p.per_node(), 0).extent[axis];
  for (int rank = 0; rank < p.parallel(); ++rank)
    for (const Shape* shape : {&q, &k})
      if (piece_region(*shape, sig.inputs[0], p.num_nodes(), p.per_node(), rank).extent[axis] != cut) return false;
  return cut > 0;
}

// A collective op (the mirrored view) reads the ranks' pieces of its input
// as they are, through a boxing that takes each whole (insert_boxing): its
// kernel reads what that makes (B, or S(0) blocks for reduce_scatter). What
// it writes: an all_reduce keeps a split input's layout (each rank's piece
// then holds the combined value), else B; an all_gather B; a
// reduce_scatter S(0) blocks.
Status deduce_collective(LogicalGraph* g, OpNode& op) {
  const graph::Placement& p = g->placement(op.placement);
  const LogicalTensor* x = g->find(op.inputs[0]);
  auto flat = [&](const Sbp& s) { return canonical(NdSbp(s), p.num_nodes(), p.per_node()); };
  for (int rank = 0; rank < p.parallel(); ++rank) {
    const Region piece = piece_region(x->meta.shape, x->sbp, p.num_nodes(), p.per_node(), rank);
    if (!x->local || piece.extent != x->local->shape)
      return invalid_argument("op '{}' ({}): rank {} holds '{}' as {} ({} over {} ranks), not the {} each rank's "
                              "ops make; the ranks' values must have one shape",
                              op.name, op.type, rank, x->name, shape_string(piece.extent), x->sbp.to_string(),
                              p.parallel(), x->local ? shape_string(x->local->shape) : "?");
  }
  op.input_sbp = {flat(op.type == "reduce_scatter" ? Sbp::split(0) : Sbp::broadcast())};
  NdSbp out = op.input_sbp[0];
  if (op.type == "all_reduce" && x->sbp.has(Sbp::kSplit)) out = x->sbp;
  op.output_sbp = {out};
  g->find(op.outputs[0])->sbp = out;
  return {};
}

}  // namespace

Status deduce_sbp(LogicalGraph* g) {
  for (OpNode& op : g->ops) {
    if (op.def->role == OpRole::kCollective) {
      RILL_RETURN_IF_ERROR(deduce_collective(g, op));
      continue;
    }
    const graph::Placement& placement = g->placement(op.placement);
    RILL_ASSIGN_OR_RETURN(std::vector<Offered> flat, candidates(*g, op));
    std::vector<NdSignature> sigs = nd_candidates(*g, op, flat);
    std::erase_if(sigs, [&](const NdSignature& sig) { return sig.ring && !ring_fits(*g, op, sig); });
    if (op.def->copies_bytes) {
      const LogicalTensor* in = g->find(op.inputs[0]);
      const Shape& out = g->find(op.outputs[0])->meta.shape;
      for (auto it = sigs.begin(); it != sigs.end();) {
        if (pieces_line_up(*it, placement, in->meta.shape, out)) {
          ++it;
          continue;
        }
        // The input already lies so, split off the batch axis (a tensor-
        // parallel layout's channels split into heads, say): gathering it
        // here would be a silent cost of the layout, so say what does not
        // divide. A batch split that does not line up (an uneven batch
        // merged with its sequence) is gathered instead, as data
        // parallelism has always been.
        const bool off_batch = !in->sbp.flat() || in->sbp.within.kind != Sbp::kSplit || in->sbp.within.axis != 0;
        if (in->placement == op.placement && in->sbp == it->inputs[0] && off_batch)
          return invalid_argument(
              "op '{}' ({} {} -> {}): its input is split {} over {} devices, whose pieces are not whole parts of "
              "the output {} split {}; use a device count that divides the split axis of both (heads, say), or "
              "split another axis",
              op.name, op.type, shape_string(in->meta.shape), shape_string(out), in->sbp.to_string(),
              placement.parallel(), shape_string(out), it->outputs[0].to_string());
        it = sigs.erase(it);
      }
    }
    std::vector<NdSignature> hinted;
    for (const NdSignature& sig : sigs) {
      bool ok = true;
      for (size_t k = 0; k < op.outputs.size(); ++k)
        ok = ok && (!op.output_hints[k] || *op.output_hints[k] == sig.outputs[k]);
      for (size_t k = 0; k < op.input_hints.size() && k < sig.inputs.size(); ++k)
        ok = ok && (!op.input_hints[k] || canonical(*op.input_hints[k], placement.num_nodes(), placement.per_node()) ==
                                              sig.inputs[k]);
      if (ok) hinted.push_back(sig);
    }
    if (hinted.empty()) {
      // Name each hinted output tensor with its hint and what it could be.
      std::vector<std::string> hints, offered;
      for (size_t k = 0; k < op.input_hints.size(); ++k)
        if (op.input_hints[k]) hints.push_back(fmt::format("input '{}' read as {}", op.inputs[k], op.input_hints[k]->to_string()));
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        if (!op.output_hints[k]) continue;
        std::vector<std::string> legal;
        for (const NdSignature& sig : sigs)
          if (std::find(legal.begin(), legal.end(), sig.outputs[k].to_string()) == legal.end())
            legal.push_back(sig.outputs[k].to_string());
        hints.push_back(fmt::format("'{}' hinted {} (it can be {})", op.outputs[k], op.output_hints[k]->to_string(),
                                    fmt::join(legal, " or ")));
      }
      for (const NdSignature& sig : sigs) offered.push_back(signature_string(sig));
      return invalid_argument("op '{}' ({}): no SBP signature gives {}; the op's signatures (inputs) -> (outputs): {}",
                              op.name, op.type, fmt::join(hints, ", "), fmt::join(offered, ", "));
    }
    int best = -1;
    int64_t best_cost = 0;
    for (size_t s = 0; s < hinted.size(); ++s) {
      int64_t cost = 0;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        const LogicalTensor* t = g->find(op.inputs[k]);
        cost += t->placement == op.placement
                    ? boxing_cost(t->sbp, hinted[s].inputs[k], t->meta.bytes(), placement.num_nodes(),
                                  placement.per_node())
                    : move_cost(t->sbp, g->placement(t->placement), hinted[s].inputs[k], placement, t->meta);
      }
      if (best < 0 || cost < best_cost) {
        best = static_cast<int>(s);
        best_cost = cost;
      }
    }
    op.input_sbp = hinted[best].inputs;
    op.output_sbp = hinted[best].outputs;
    op.ring = hinted[best].ring;
    for (size_t k = 0; k < op.outputs.size(); ++k) g->find(op.outputs[k])->sbp = op.output_sbp[k];
  }
  return {};
}

}  // namespace rill::compiler
