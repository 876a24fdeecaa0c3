#include <doctest/doctest.h>

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
