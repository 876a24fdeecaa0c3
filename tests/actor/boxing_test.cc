// Boxing tests: every SBP conversion, element by element against the logical
// tensor it must equal, for 1, 2 and 3 pieces per node on 1, 2 and 3 nodes
// (nodes are threads joined by the in-process transport, or by loopback
// ZeroMQ for a few cases), in each dtype (f32, i32, bf16, f16), with shapes
// whose split axes do not divide by the piece count. Values are small
// integers, so every sum is exact in each dtype whatever its order: results
// compare with ==.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "actor/body.h"
#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm::testing;

namespace {

// Element e of the logical tensor, and of P-piece k (pieces sum to the tensor).
int g_salt = 0;  // tells apart tensors boxed together (a bucket)
int logical_value(int64_t e) { return static_cast<int>((e * 7 + 3 + g_salt) % 23) - 11; }
int partial_value(int64_t e, int k, int parallel) {
  if (k + 1 < parallel) return static_cast<int>((e * 5 + k * 3) % 9) - 4;
  int rest = logical_value(e);
  for (int q = 0; q + 1 < parallel; ++q) rest -= partial_value(e, q, parallel);
  return rest;
}

// A dense buffer covering one region of the logical tensor, of either dtype.
struct Piece {
  Region region;
  DType dtype;
  std::vector<int32_t> storage;  // room for 4-byte elements: f32 or i32 bits, or bf16 / f16 in its first half
  TensorView view;

  Piece(Region r, DType d) : region(std::move(r)), dtype(d), storage(static_cast<size_t>(region.size()), -999) {
    view = TensorView{storage.data(), region.extent, dtype};
  }
  // Values are small integers (|v| < 256): exact in every dtype, and so
  // are their sums.
  void set(size_t i, int v) {
    switch (dtype) {
      case DType::kF32: reinterpret_cast<float*>(storage.data())[i] = static_cast<float>(v); break;
      case DType::kI32: storage[i] = v; break;
      case DType::kBF16: halves()[i] = BFloat16::from_float(static_cast<float>(v)).bits; break;
      case DType::kF16: halves()[i] = Float16::from_float(static_cast<float>(v)).bits; break;
    }
  }
  int get(size_t i) const {
    switch (dtype) {
      case DType::kF32: return static_cast<int>(reinterpret_cast<const float*>(storage.data())[i]);
      case DType::kI32: return storage[i];
      case DType::kBF16: return static_cast<int>(BFloat16::from_bits(halves()[i]).to_float());
      case DType::kF16: return static_cast<int>(Float16::from_bits(halves()[i]).to_float());
    }
    return 0;
  }
  uint16_t* halves() const { return reinterpret_cast<uint16_t*>(const_cast<int32_t*>(storage.data())); }
  // Sets element i (row-major within the region) from its logical index.
  template <typename Fn>
  void set_all(Fn&& value_at) {
    for (int64_t i = 0; i < region.size(); ++i) set(static_cast<size_t>(i), value_at(logical_index(i)));
  }
  int64_t logical_index(int64_t i) const { return logical_index_of(i, region); }
  static int64_t logical_index_of(int64_t i, const Region& r);
};

Shape g_shape;  // the logical shape of the case being run (one thread per node reads it)

int64_t Piece::logical_index_of(int64_t i, const Region& r) {
  // i -> coordinates in the region -> linear index in the logical tensor.
  const size_t rank = r.extent.size();
  std::vector<int64_t> coord(rank);
  for (size_t a = rank; a-- > 0;) {
    coord[a] = i % r.extent[a] + r.origin[a];
    i /= r.extent[a];
  }
  int64_t linear = 0;
  for (size_t a = 0; a < rank; ++a) linear = linear * g_shape[a] + coord[a];
  return linear;
}

// Which part of the logical tensor piece (node, device) holds when `sbp`
// has P on some axes (the parts sum to the tensor), and how many parts.
int part_of(const NdSbp& sbp, int nodes, int local, int node, int device) {
  const int across = sbp.across.kind == Sbp::kPartialSum ? node : 0;
  const int within = sbp.within.kind == Sbp::kPartialSum ? device : 0;
  return across * (sbp.within.kind == Sbp::kPartialSum ? local : 1) + within;
}
int parts_of(const NdSbp& sbp, int nodes, int local) {
  return (sbp.across.kind == Sbp::kPartialSum ? nodes : 1) * (sbp.within.kind == Sbp::kPartialSum ? local : 1);
}
// Pieces per node: one when `within` is B (the node's shared regst).
int pieces_per_node(const NdSbp& sbp, int local) { return sbp.within.kind == Sbp::kBroadcast ? 1 : local; }

using NodePieces = std::vector<std::vector<std::unique_ptr<Piece>>>;

// The input pieces of every node for a tensor in `sbp`.
NodePieces inputs(const NdSbp& sbp, DType dtype, int nodes, int local) {
  NodePieces pieces(static_cast<size_t>(nodes));
  for (int node = 0; node < nodes; ++node)
    for (int d = 0; d < pieces_per_node(sbp, local); ++d) {
      auto p = std::make_unique<Piece>(piece_region(g_shape, sbp, nodes, local, node * local + d), dtype);
      const int part = part_of(sbp, nodes, local, node, d), parts = parts_of(sbp, nodes, local);
      if (parts > 1) p->set_all([&](int64_t e) { return partial_value(e, part, parts); });
      else p->set_all(logical_value);
      pieces[static_cast<size_t>(node)].push_back(std::move(p));
    }
  return pieces;
}

// Checks the output pieces of every node against the logical tensor: along
// a B axis the pieces are replicas (each equal to the one at index 0); the
// others (index 0 on every B axis) cover the tensor, and where they overlap
// (P axes) they sum to it.
Status check_outputs(const NdSbp& sbp, const NodePieces& outs) {
  const int64_t n = num_elements(g_shape);
  std::vector<int64_t> sums(static_cast<size_t>(n), 0);
  std::vector<bool> covered(static_cast<size_t>(n), false);
  for (size_t node = 0; node < outs.size(); ++node)
    for (size_t d = 0; d < outs[node].size(); ++d) {
      const Piece& piece = *outs[node][d];
      const size_t rep_node = sbp.across.kind == Sbp::kBroadcast ? 0 : node;
      if (rep_node != node) {
        const Piece& rep = *outs[rep_node][d];
        for (int64_t i = 0; i < piece.region.size(); ++i)
          if (piece.get(static_cast<size_t>(i)) != rep.get(static_cast<size_t>(i)))
            return internal_error("node {} piece {} differs from node 0's replica at element {}: {} vs {}", node, d,
                                  i, piece.get(static_cast<size_t>(i)), rep.get(static_cast<size_t>(i)));
        continue;
      }
      for (int64_t i = 0; i < piece.region.size(); ++i) {
        const auto e = static_cast<size_t>(piece.logical_index(i));
        sums[e] += piece.get(static_cast<size_t>(i));
        covered[e] = true;
      }
    }
  for (int64_t e = 0; e < n; ++e) {
    if (!covered[static_cast<size_t>(e)]) return internal_error("no piece covers logical element {}", e);
    if (sums[static_cast<size_t>(e)] != logical_value(e))
      return internal_error("pieces give {} at logical element {}, expected {}", sums[static_cast<size_t>(e)], e,
                            logical_value(e));
  }
  return {};
}

// Runs one conversion of `g_shape` over nodes x local pieces, as the chain of
// boxing tasks the compiler would insert (boxing_steps), each step's outputs
// the next one's inputs; returns the first failure.
Status run_case(Kind kind, NdSbp in, NdSbp out, DType dtype, int nodes, int local, bool per_piece = false) {
  in = canonical(in, nodes, local);
  out = canonical(out, nodes, local);
  const int parallel = nodes * local;
  auto transports = nodes > 1 ? make_world(kind, nodes) : std::vector<std::unique_ptr<comm::Transport>>{};
  NodePieces current = inputs(in, dtype, nodes, local);
  NdSbp now = in;
  uint64_t tag = 7;
  for (const auto& [from, to] : boxing_steps(in, out, nodes, local)) {
    if (boxing_form(from, to, nodes) == BoxingForm::kChain)
      return internal_error("boxing_steps gave {} -> {}, which no task does", from.to_string(), to.to_string());
    NodePieces next(static_cast<size_t>(nodes));
    for (int node = 0; node < nodes; ++node)
      for (int d = 0; d < pieces_per_node(to, local); ++d)
        next[static_cast<size_t>(node)].push_back(
            std::make_unique<Piece>(piece_region(g_shape, to, nodes, local, node * local + d), dtype));
    auto statuses = run_ranks(nodes, [&, from = from, to = to](int node) -> Status {
      std::unique_ptr<comm::Collectives> collectives;
      if (nodes > 1) collectives = std::make_unique<comm::Collectives>(*transports[static_cast<size_t>(node)]);
      std::vector<const TensorView*> in_views, out_views;
      for (auto& p : current[static_cast<size_t>(node)]) in_views.push_back(&p->view);
      for (auto& p : next[static_cast<size_t>(node)]) out_views.push_back(&p->view);
      if (per_piece) {  // one body per output piece, as the device threads run them
        for (int d = 0; d < static_cast<int>(out_views.size()); ++d) {
          BoxingBody body(from, to, parallel, TensorMeta{g_shape, dtype}, node * local, local, nullptr, tag, d);
          std::vector<const TensorView*> one = {out_views[static_cast<size_t>(d)]};
          RILL_RETURN_IF_ERROR(body.act(ActIo{0, in_views, one}));
        }
        return {};
      }
      BoxingBody body(from, to, parallel, TensorMeta{g_shape, dtype}, node * local, local, collectives.get(), tag);
      // Twice: the second act must not depend on what the first left behind.
      for (int round = 0; round < 2; ++round) {
        RILL_RETURN_IF_ERROR(body.act(ActIo{round, in_views, out_views}));
        if (round == 0)
          for (auto& p : next[static_cast<size_t>(node)]) p->set_all([](int64_t) { return 555; });
      }
      return {};
    });
    for (const Status& s : statuses)
      RILL_RETURN_IF_ERROR(s.with_context(fmt::format("step {} -> {}", from.to_string(), to.to_string())));
    current = std::move(next);
    now = to;
    ++tag;
  }
  return check_outputs(now, current);
}

std::vector<Sbp> all_sbps(size_t rank) {
  std::vector<Sbp> sbps = {Sbp::broadcast(), Sbp::partial_sum()};
  for (int a = 0; a < static_cast<int>(rank); ++a) sbps.push_back(Sbp::split(a));
  return sbps;
}

}  // namespace

TEST_CASE("every boxing conversion equals the logical tensor: 1-3 nodes x 1-3 pieces, uneven shapes, each dtype") {
  // [5, 7]: neither axis divides by 2, 3, 4, 6, 9. [1, 7, 4]: split along
  // axis 1 (the pieces are contiguous; all-gather in place) and axis 2 (not).
  // [2]: fewer elements than pieces for 3 x 3.
  for (const Shape& shape : {Shape{5, 7}, Shape{1, 7, 4}, Shape{2}}) {
    g_shape = shape;
    for (const Sbp& in : all_sbps(shape.size()))
      for (const Sbp& out : all_sbps(shape.size())) {
        if (in == out) continue;
        for (DType dtype : kDTypes)
          for (int nodes = 1; nodes <= 3; ++nodes)
            for (int local = 1; local <= 3; ++local) {
              if (nodes * local == 1) continue;
              if (canonical(in, nodes, local) == canonical(out, nodes, local)) continue;
              CAPTURE(shape_string(shape));
              CAPTURE(in.to_string());
              CAPTURE(out.to_string());
              CAPTURE(dtype_name(dtype));
              CAPTURE(nodes);
              CAPTURE(local);
              Status status = run_case(Kind::kInproc, in, out, dtype, nodes, local);
              INFO(status.to_string());
              CHECK(status.ok());
            }
      }
  }
}

TEST_CASE("every 2-D boxing equals the logical tensor: 2-3 nodes x 2-3 devices, one task or a chain") {
  // Every pair of 2-D SBPs of a [5, 7] tensor (B, P, S(0), S(1) on each
  // axis); the ones no single task does run as the chain the compiler makes.
  g_shape = Shape{5, 7};
  std::vector<NdSbp> sbps;
  for (const Sbp& a : all_sbps(2))
    for (const Sbp& w : all_sbps(2)) sbps.emplace_back(a, w);
  int chains = 0;
  for (auto [nodes, local] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}})
    for (const NdSbp& in : sbps)
      for (const NdSbp& out : sbps) {
        if (in == out) continue;
        chains += boxing_steps(in, out, nodes, local).size() > 1;
        CAPTURE(in.to_string());
        CAPTURE(out.to_string());
        CAPTURE(nodes);
        CAPTURE(local);
        Status status = run_case(Kind::kInproc, in, out, DType::kF32, nodes, local);
        INFO(status.to_string());
        CHECK(status.ok());
      }
  CHECK(chains > 0);
}

TEST_CASE("conversions within a node, one task per output piece, equal the logical tensor") {
  // What the device threads run: each makes its own piece (P -> S sums only
  // its slice). Every 2-D pair whose step is within a node, to S or P.
  for (const Shape& shape : {Shape{5, 7}, Shape{1, 7, 4}}) {
    g_shape = shape;
    std::vector<NdSbp> sbps;
    for (const Sbp& a : all_sbps(shape.size()))
      for (const Sbp& w : all_sbps(shape.size())) sbps.emplace_back(a, w);
    for (auto [nodes, local] : {std::pair{1, 2}, std::pair{1, 3}, std::pair{2, 2}, std::pair{3, 2}})
      for (const NdSbp& in : sbps)
        for (const NdSbp& out : sbps) {
          const NdSbp a = canonical(in, nodes, local), b = canonical(out, nodes, local);
          if (a == b || b.within.kind == Sbp::kBroadcast || boxing_form(a, b, nodes) != BoxingForm::kWithinNode)
            continue;
          CAPTURE(in.to_string());
          CAPTURE(out.to_string());
          CAPTURE(nodes);
          CAPTURE(local);
          Status status = run_case(Kind::kInproc, a, b, DType::kF32, nodes, local, true);
          INFO(status.to_string());
          CHECK(status.ok());
        }
  }
}

TEST_CASE("boxing across nodes over loopback ZeroMQ: each collective, 1-D and lane by lane, and a chain") {
  g_shape = Shape{9, 11};
  const Sbp b = Sbp::broadcast(), p = Sbp::partial_sum(), s0 = Sbp::split(0), s1 = Sbp::split(1);
  // 1-D: all-reduce, reduce-scatter, all-gather, all-to-all. 2-D: the hybrid
  // layout's gradient (P, S(1)) -> (B, S(1)), a gather and an all-to-all
  // lane by lane, and a chain.
  for (auto [in, out] : {std::pair{NdSbp(p), NdSbp(b)}, std::pair{NdSbp(p), NdSbp(s1)}, std::pair{NdSbp(s1), NdSbp(b)},
                         std::pair{NdSbp(s0), NdSbp(s1)}, std::pair{NdSbp(p, s1), NdSbp(b, s1)},
                         std::pair{NdSbp(s0, b), NdSbp(b)}, std::pair{NdSbp(s0, p), NdSbp(s1, p)},
                         std::pair{NdSbp(s0), NdSbp(b, s1)}}) {
    CAPTURE(in.to_string());
    CAPTURE(out.to_string());
    Status status = run_case(Kind::kZmq, in, out, DType::kF32, 3, 2);
    INFO(status.to_string());
    CHECK(status.ok());
  }
}

TEST_CASE("a bucket sums several tensors' P pieces across nodes in one all-reduce") {
  // Three tensors of different shapes (one a scalar), 1-3 pieces per node,
  // 2 and 3 nodes. Values are small integers: sums are exact in f32.
  const std::vector<Shape> shapes = {Shape{5, 7}, Shape{}, Shape{3}};
  for (Kind kind : {Kind::kInproc, Kind::kZmq})
    for (int nodes = 2; nodes <= 3; ++nodes)
      for (int local = 1; local <= 3; ++local) {
        if (kind == Kind::kZmq && local != 2) continue;
        CAPTURE(nodes);
        CAPTURE(local);
        const int parallel = nodes * local;
        auto transports = make_world(kind, nodes);
        std::vector<TensorMeta> metas;
        for (const Shape& s : shapes) metas.push_back({s, DType::kF32});
        // ins[node]: tensor-major, local pieces each; outs[node]: one B per tensor.
        std::vector<NodePieces> ins(shapes.size()), outs(shapes.size());
        for (size_t k = 0; k < shapes.size(); ++k) {
          g_shape = shapes[k];
          g_salt = static_cast<int>(k) * 5;
          ins[k] = inputs(Sbp::partial_sum(), DType::kF32, nodes, local);
          outs[k].resize(static_cast<size_t>(nodes));
          for (int node = 0; node < nodes; ++node)
            outs[k][static_cast<size_t>(node)].push_back(
                std::make_unique<Piece>(whole_region(shapes[k]), DType::kF32));
        }
        auto statuses = run_ranks(nodes, [&](int node) -> Status {
          comm::Collectives collectives(*transports[static_cast<size_t>(node)]);
          BoxingBody body(metas, parallel, node * local, local, &collectives, 9);
          std::vector<const TensorView*> in_views, out_views;
          for (size_t k = 0; k < shapes.size(); ++k) {
            for (auto& p : ins[k][static_cast<size_t>(node)]) in_views.push_back(&p->view);
            out_views.push_back(&outs[k][static_cast<size_t>(node)][0]->view);
          }
          return body.act(ActIo{0, in_views, out_views});
        });
        for (const Status& s : statuses) REQUIRE(s.ok());
        for (size_t k = 0; k < shapes.size(); ++k) {
          g_shape = shapes[k];
          g_salt = static_cast<int>(k) * 5;
          // Pieces' logical indices need g_shape set to this tensor's shape.
          Status status = check_outputs(Sbp::broadcast(), outs[k]);
          INFO(status.to_string());
          CHECK(status.ok());
        }
      }
  g_salt = 0;
}


