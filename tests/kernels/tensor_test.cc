#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "kernels/tensor.h"

namespace rill {

TEST_CASE("piece_region splits balanced pieces that cover the axis") {
  Shape logical{5, 3};
  CHECK(piece_region(logical, Sbp::split(0), 1, 2, 0).extent == Shape{3, 3});
  CHECK(piece_region(logical, Sbp::split(0), 1, 2, 1).extent == Shape{2, 3});
  CHECK(piece_region(logical, Sbp::split(0), 1, 2, 1).origin == Shape{3, 0});
  CHECK(piece_region(logical, Sbp::split(1), 1, 3, 2).extent == Shape{5, 1});
  CHECK(piece_region(logical, Sbp::broadcast(), 1, 2, 1).extent == logical);
  CHECK(split_offset(5, 2, 1) == 3);
}

TEST_CASE("2-D pieces nest: by node along `across`, then by device along `within`") {
  const Shape logical{6, 5};
  const Sbp b = Sbp::broadcast(), p = Sbp::partial_sum(), s0 = Sbp::split(0), s1 = Sbp::split(1);
  // (S(0), S(1)) on 2 x 2: rows by node, columns by device.
  CHECK(piece_region(logical, NdSbp(s0, s1), 2, 2, 3) == Region{{3, 3}, {3, 2}});
  // (S(0), S(0)) nests: node 0 has rows 0-2, split 2 + 1; not the flat 2, 2, 1, 1.
  CHECK(piece_region(logical, NdSbp(s0), 2, 2, 1) == Region{{2, 0}, {1, 5}});
  CHECK(piece_region(logical, NdSbp(s0), 2, 2, 2) == Region{{3, 0}, {2, 5}});
  // B and P cover the node's part.
  CHECK(piece_region(logical, NdSbp(s1, b), 2, 2, 1) == Region{{0, 0}, {6, 3}});
  CHECK(piece_region(logical, NdSbp(p, s0), 3, 2, 5) == Region{{3, 0}, {3, 5}});
  CHECK(node_region(logical, NdSbp(s1, p), 2, 1) == Region{{0, 3}, {6, 2}});
  // An axis over one part is moot: canonical makes it the other one.
  CHECK(canonical(NdSbp(s0, b), 1, 4) == NdSbp(b));
  CHECK(canonical(NdSbp(s0, b), 4, 1) == NdSbp(s0));
  CHECK(canonical(NdSbp(s0, b), 2, 2) == NdSbp(s0, b));
}

TEST_CASE("one boxing task per form; the others chain through (across, B)") {
  const Sbp b = Sbp::broadcast(), p = Sbp::partial_sum(), s0 = Sbp::split(0), s1 = Sbp::split(1);
  CHECK(boxing_form(NdSbp(p, s1), NdSbp(b, s1), 2) == BoxingForm::kLanes);
  CHECK(boxing_form(NdSbp(s0, p), NdSbp(s0, b), 2) == BoxingForm::kWithinNode);
  CHECK(boxing_form(NdSbp(p), NdSbp(b), 2) == BoxingForm::kFlat);
  CHECK(boxing_form(NdSbp(p), NdSbp(b), 1) == BoxingForm::kWithinNode);
  // A lane may not split the axis the nodes split.
  CHECK(boxing_form(NdSbp(s0, s0), NdSbp(b, s0), 2) == BoxingForm::kChain);
  CHECK(boxing_form(NdSbp(s0, b), NdSbp(b, s1), 2) == BoxingForm::kChain);
  using Steps = std::vector<std::pair<NdSbp, NdSbp>>;
  // One axis at a time: within first (a local slice, then lanes), ...
  CHECK(boxing_steps(NdSbp(s0, b), NdSbp(b, s1), 2, 2) ==
        Steps{{NdSbp(s0, b), NdSbp(s0, s1)}, {NdSbp(s0, s1), NdSbp(b, s1)}});
  // ... partial sums reduce-scattered in the node before crossing, ...
  CHECK(boxing_steps(NdSbp(p), NdSbp(b, s0), 2, 2) == Steps{{NdSbp(p), NdSbp(p, s0)}, {NdSbp(p, s0), NdSbp(b, s0)}});
  // ... across first when the target is P within.
  CHECK(boxing_steps(NdSbp(s0, b), NdSbp(s1, p), 2, 2) ==
        Steps{{NdSbp(s0, b), NdSbp(s1, b)}, {NdSbp(s1, b), NdSbp(s1, p)}});
  CHECK(boxing_steps(NdSbp(s0, s0), NdSbp(b, s0), 2, 2) ==
        Steps{{NdSbp(s0, s0), NdSbp(s0, b)}, {NdSbp(s0, b), NdSbp(b)}, {NdSbp(b), NdSbp(b, s0)}});
  CHECK(boxing_steps(NdSbp(p, s1), NdSbp(b, s1), 2, 2) == Steps{{NdSbp(p, s1), NdSbp(b, s1)}});
  CHECK(boxing_steps(NdSbp(s0, b), NdSbp(b, s1), 1, 2) == Steps{{NdSbp(b), NdSbp(s1)}});
  CHECK(boxing_steps(NdSbp(s0, b), NdSbp(s0, b), 2, 2).empty());
}

TEST_CASE("a device collective works on one axis: all devices (1-D), a node's devices, or a lane") {
  const Sbp b = Sbp::broadcast(), p = Sbp::partial_sum(), s0 = Sbp::split(0), s1 = Sbp::split(1),
            s2 = Sbp::split(2);
  auto is = [](std::optional<AxisCollective> c, CollectiveCall call, CollectiveScope scope) {
    return c.has_value() && c->call == call && c->scope == scope;
  };
  using enum CollectiveCall;
  using enum CollectiveScope;
  CHECK(is(axis_collective(NdSbp(p), NdSbp(b)), kAllReduce, kAll));
  CHECK(is(axis_collective(NdSbp(p), NdSbp(s0)), kReduceScatter, kAll));
  CHECK(is(axis_collective(NdSbp(s0), NdSbp(b)), kAllGather, kAll));
  // `across` unchanged: among each node's devices, on the node's part.
  CHECK(is(axis_collective(NdSbp(s0, p), NdSbp(s0, b)), kAllReduce, kNode));
  CHECK(is(axis_collective(NdSbp(p), NdSbp(p, s0)), kReduceScatter, kNode));
  CHECK(is(axis_collective(NdSbp(s0, s0), NdSbp(s0, b)), kAllGather, kNode));
  // `within` unchanged: among each lane, one rank a node.
  CHECK(is(axis_collective(NdSbp(p, s1), NdSbp(b, s1)), kAllReduce, kLane));
  CHECK(is(axis_collective(NdSbp(p, s0), NdSbp(b, s0)), kAllReduce, kLane));
  CHECK(is(axis_collective(NdSbp(p, s1), NdSbp(s0, s1)), kReduceScatter, kLane));
  CHECK(is(axis_collective(NdSbp(s0, b), NdSbp(b)), kAllGather, kLane));
  // Along any tensor axis: columns too.
  CHECK(is(axis_collective(NdSbp(p), NdSbp(s1)), kReduceScatter, kAll));
  CHECK(axis_collective(NdSbp(p), NdSbp(s1))->split == 1);
  CHECK(is(axis_collective(NdSbp(b, s1), NdSbp(b)), kAllGather, kNode));
  CHECK(axis_collective(NdSbp(b, s1), NdSbp(b))->split == 1);
  CHECK(axis_collective(NdSbp(s0), NdSbp(b))->split == 0);
  // All-to-all: blocks along the output's axis sent, along the input's received.
  CHECK(is(axis_collective(NdSbp(s0), NdSbp(s1)), kAllToAll, kAll));
  CHECK(axis_collective(NdSbp(s0), NdSbp(s1))->split == 1);
  CHECK(axis_collective(NdSbp(s0), NdSbp(s1))->gathered == 0);
  CHECK(is(axis_collective(NdSbp(s0, s1), NdSbp(s0, s0)), kAllToAll, kNode));
  CHECK(axis_collective(NdSbp(s0, s1), NdSbp(s0, s0))->gathered == 1);
  CHECK(is(axis_collective(NdSbp(s1, s2), NdSbp(s0, s2)), kAllToAll, kLane));
  // None: a lane may not split the axis the nodes split, and local slices,
  // an all-to-all along one axis or both axes at once are a boxing task's.
  CHECK_FALSE(axis_collective(NdSbp(p, s0), NdSbp(s0, s0)));
  CHECK_FALSE(axis_collective(NdSbp(s0, s0), NdSbp(b, s0)));
  CHECK_FALSE(axis_collective(NdSbp(s1, s1), NdSbp(b, s1)));
  CHECK_FALSE(axis_collective(NdSbp(s0, s1), NdSbp(s1, s1)));
  CHECK_FALSE(axis_collective(NdSbp(s0), NdSbp(s0)));
  CHECK_FALSE(axis_collective(NdSbp(b), NdSbp(s0)));
  CHECK_FALSE(axis_collective(NdSbp(p, s0), NdSbp(b, s1)));
  CHECK_FALSE(axis_collective(NdSbp(b), NdSbp(b)));
}

TEST_CASE("a device makes B -> S, B -> P and S -> P from its own piece, on one axis, where its piece holds them") {
  const Sbp b = Sbp::broadcast(), p = Sbp::partial_sum(), s0 = Sbp::split(0), s1 = Sbp::split(1);
  const Shape logical{8, 6};
  auto scope = [&](NdSbp in, NdSbp out, int nodes = 2, int per_node = 2) {
    return own_piece_scope(canonical(in, nodes, per_node), canonical(out, nodes, per_node), logical, nodes, per_node);
  };
  using enum CollectiveScope;
  CHECK(scope(NdSbp(b), NdSbp(s1)) == kAll);
  CHECK(scope(NdSbp(s0), NdSbp(p)) == kAll);
  CHECK(scope(NdSbp(b), NdSbp(p), 1, 4) == kAll);
  CHECK(scope(NdSbp(s0, b), NdSbp(s0, s1)) == kNode);
  CHECK(scope(NdSbp(p, b), NdSbp(p, p)) == kNode);
  CHECK(scope(NdSbp(b, s1), NdSbp(s0, s1)) == kLane);
  CHECK(scope(NdSbp(s0, s1), NdSbp(p, s1)) == kLane);
  // Not its own: (B, S(0)) -> S(0) needs rows another device holds; and
  // collectives, or both axes at once.
  CHECK_FALSE(scope(NdSbp(b, s0), NdSbp(s0, s0)));
  CHECK_FALSE(scope(NdSbp(p), NdSbp(b)));
  CHECK_FALSE(scope(NdSbp(s0), NdSbp(s1)));
  CHECK_FALSE(scope(NdSbp(b, b), NdSbp(s0, s1)));
  // B -> P keeps the value on the axis's first rank (a host boxing's holder).
  CHECK(own_piece_holder(kAll, 0, 2));
  CHECK_FALSE(own_piece_holder(kAll, 2, 2));
  CHECK(own_piece_holder(kNode, 2, 2));
  CHECK_FALSE(own_piece_holder(kNode, 1, 2));
  CHECK(own_piece_holder(kLane, 1, 2));
  CHECK_FALSE(own_piece_holder(kLane, 2, 2));
}

// Boxes between pieces of a [3, 4, 5, 6] tensor, copied as the strided 2-D
// copies for_each_box_plane gives, against copy_region element by element;
// whole trailing axes fold into one row, whole axes before them into rows.
TEST_CASE("a box as strided 2-D copies: the same elements as copying it row by row") {
  const Shape logical{3, 4, 5, 6};
  struct Case {
    Region src, dst, box;
    size_t calls;
  };
  const Region whole = whole_region(logical);
  const Region cols{{0, 0, 0, 2}, {3, 4, 5, 3}}, heads{{0, 0, 2, 0}, {3, 4, 2, 6}}, rows{{1, 0, 0, 0}, {1, 4, 5, 6}};
  for (const Case& c : {Case{whole, cols, cols, 1},             // columns: 60 rows of 3, one call
                        Case{whole, heads, heads, 1},           // axis 2: 12 rows of 2 x 6
                        Case{whole, rows, rows, 1},             // one contiguous block
                        Case{heads, whole, heads, 1},           // into the whole (S -> P's copy)
                        Case{cols, heads, intersect(cols, heads), 12},  // rows of 3, whole in neither: 2 a call
                        Case{whole, whole, whole, 1}}) {
    CAPTURE(shape_string(c.box.extent));
    std::vector<float> src(static_cast<size_t>(c.src.size())), want(static_cast<size_t>(c.dst.size()), -1.0f);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
    std::vector<float> got = want;
    copy_region(src.data(), c.src, want.data(), c.dst, c.box, sizeof(float));
    size_t calls = 0;
    for_each_box_plane(c.src, c.dst, c.box, sizeof(float),
                       [&](size_t from, size_t to, size_t width, size_t n, size_t src_pitch, size_t dst_pitch) {
                         ++calls;
                         for (size_t r = 0; r < n; ++r)
                           std::memcpy(reinterpret_cast<std::byte*>(got.data()) + to + r * dst_pitch,
                                       reinterpret_cast<const std::byte*>(src.data()) + from + r * src_pitch, width);
                       });
    CHECK(got == want);
    CHECK(calls == c.calls);
  }
}

TEST_CASE("every dtype has a name that parses back, a size, and its C++ element type") {
  for (DType dtype : kDTypes) {
    CAPTURE(dtype_name(dtype));
    DType parsed{};
    REQUIRE(parse_dtype(dtype_name(dtype), &parsed));
    CHECK(parsed == dtype);
    const size_t size = visit_dtype(dtype, []<typename T>(std::type_identity<T>) { return sizeof(T); });
    CHECK(dtype_size(dtype) == size);
    CHECK(TensorMeta{{3, 5}, dtype}.bytes() == 15 * size);
  }
  CHECK(visit_dtype(DType::kF32, []<typename T>(std::type_identity<T>) { return std::is_same_v<T, float>; }));
  CHECK(visit_dtype(DType::kI32, []<typename T>(std::type_identity<T>) { return std::is_same_v<T, int32_t>; }));
}

TEST_CASE("sbp and dtype parse what they print") {
  for (Sbp sbp : {Sbp::split(0), Sbp::split(1), Sbp::broadcast(), Sbp::partial_sum()}) {
    Sbp parsed;
    REQUIRE(parse_sbp(sbp.to_string(), &parsed));
    CHECK(parsed == sbp);
  }
  Sbp bad;
  CHECK_FALSE(parse_sbp("S(x)", &bad));
  for (const char* text : {"(S(0), B)", "(P,S(1))", "( B , P )"}) {
    NdSbp nd;
    REQUIRE(parse_nd_sbp(text, &nd));
    NdSbp back;
    REQUIRE(parse_nd_sbp(nd.to_string(), &back));
    CHECK(back == nd);
    CHECK_FALSE(nd.flat());
  }
  NdSbp nd;
  REQUIRE(parse_nd_sbp("S(1)", &nd));
  CHECK(nd == NdSbp(Sbp::split(1), Sbp::split(1)));
  CHECK(nd.to_string() == "S(1)");
  CHECK(NdSbp(Sbp::split(0), Sbp::broadcast()).to_string() == "(S(0), B)");
  for (const char* text : {"(S(0))", "(S(0), B, P)", "S(0), B", "(S(0),)", "()"}) CHECK_FALSE(parse_nd_sbp(text, &nd));
  DType dtype;
  CHECK(parse_dtype("float32", &dtype));
  CHECK(dtype == DType::kF32);
  CHECK_FALSE(parse_dtype("f64", &dtype));
}

}  // namespace rill
