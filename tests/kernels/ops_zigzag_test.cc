// The zigzag order (kernels/ops/zigzag_math.h) and the zigzag op
// (kernels/ops/zigzag.cc). Values are copies: exact.
#include <doctest/doctest.h>

#include <algorithm>

#include "kernels/op.h"
#include "kernels/ops/zigzag_math.h"
#include "tests/kernels/grad_check.h"
#include "tests/kernels/sbp_check.h"

namespace rill {
namespace {

using testing::Tensor;

Tensor iota(Shape shape) {
  Tensor t = Tensor::zeros(std::move(shape));
  for (size_t i = 0; i < t.f32.size(); ++i) t.f32[i] = static_cast<float>(i);
  return t;
}

Tensor zigzag(const Tensor& x, int64_t axis, int64_t parts, int64_t inverse = 0) {
  auto out = testing::run_op("zigzag", {x}, {{"axis", axis}, {"parts", parts}, {"inverse", inverse}});
  REQUIRE_MESSAGE(out.ok(), out.status().to_string());
  return (*out)[0];
}

Status infer_error(const Shape& shape, const Attrs& attrs) {
  std::vector<TensorMeta> outputs;
  return infer_op(*find_op("zigzag"), attrs, std::vector<TensorMeta>{{shape}}, &outputs);
}

}  // namespace

TEST_CASE("the zigzag order puts chunk k and chunk 2p-1-k in piece k") {
  // 12 places, 3 parts: 6 chunks of 2, laid 0, 5, 1, 4, 2, 3.
  const Zigzag z{12, 3};
  std::vector<int64_t> places;
  for (int64_t i = 0; i < 12; ++i) places.push_back(z.place(i));
  CHECK(places == std::vector<int64_t>{0, 1, 10, 11, 2, 3, 8, 9, 4, 5, 6, 7});
  CHECK(z.run(0, 12) == 2);
  CHECK(z.run(3, 12) == 1);
  CHECK(z.run(3, 1) == 1);
  // One part (or none): the natural order, one run.
  for (int64_t parts : {0, 1}) {
    const Zigzag natural{12, parts};
    for (int64_t i = 0; i < 12; ++i) CHECK(natural.place(i) == i);
    CHECK(natural.run(5, 7) == 7);
  }
}

TEST_CASE("in the zigzag order every piece of a causal mask has the same work") {
  // Query place t sees the t + 1 keys at or before it. A piece's work is the
  // sum over its queries; contiguous pieces of the natural order differ
  // (the last does the most), those of the zigzag order are equal.
  for (int64_t parts : {2, 3, 4}) {
    CAPTURE(parts);
    const int64_t length = 8 * parts, piece = length / parts;
    const Zigzag z{length, parts};
    std::vector<int64_t> work(static_cast<size_t>(parts), 0), natural(static_cast<size_t>(parts), 0);
    for (int64_t i = 0; i < length; ++i) {
      work[static_cast<size_t>(i / piece)] += z.place(i) + 1;
      natural[static_cast<size_t>(i / piece)] += i + 1;
    }
    CHECK(std::all_of(work.begin(), work.end(), [&](int64_t w) { return w == work[0]; }));
    CHECK(natural.back() > natural.front());
  }
}

TEST_CASE("zigzag lays a tensor's chunks in the order along its axis, and its inverse lays them back") {
  const Tensor x = iota({1, 8});
  CHECK(zigzag(x, 1, 2).f32 == std::vector<float>{0, 1, 6, 7, 2, 3, 4, 5});
  CHECK(zigzag(zigzag(x, 1, 2), 1, 2, 1).f32 == x.f32);
  CHECK(zigzag(x, 1, 1).f32 == x.f32);
  // Axis 0 of [8, 2] (a position table) moves whole rows; a negative axis counts from the end.
  const Tensor rows = iota({8, 2});
  CHECK(zigzag(rows, 0, 2).f32 == std::vector<float>{0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(zigzag(rows, -2, 2).f32 == zigzag(rows, 0, 2).f32);
  // Token ids (i32) of [2, 4] over 2 parts: chunks of one.
  auto ids = testing::run_op("zigzag", {Tensor::ints({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7})},
                             {{"axis", int64_t{1}}, {"parts", int64_t{2}}});
  REQUIRE(ids.ok());
  CHECK((*ids)[0].i32 == std::vector<int32_t>{0, 3, 1, 2, 4, 7, 5, 6});
}

TEST_CASE("zigzag's gradient is its inverse, and its SBP signatures hold on 2 and 3 pieces") {
  const Attrs attrs{{"axis", int64_t{1}}, {"parts", int64_t{3}}};
  CHECK(testing::check_gradients("zigzag", {Tensor::uniform({2, 6, 3}, 1)}, attrs, {0}).ok());
  CHECK(testing::check_gradients("zigzag", {Tensor::uniform({2, 6, 3}, 2)},
                                 {{"axis", int64_t{1}}, {"parts", int64_t{3}}, {"inverse", int64_t{1}}}, {0})
            .ok());
  for (int parallel : {2, 3}) {
    Status s = testing::check_sbp_signatures("zigzag", {Tensor::uniform({6, 12, 3}, 3)}, attrs, parallel);
    CHECK_MESSAGE(s.ok(), s.to_string());
  }
  // The axis it orders is never split: a piece of it is not in the order.
  std::vector<TensorMeta> in{{{6, 12, 3}}};
  for (const SbpSignature& sig : find_op("zigzag")->sbp(attrs, in)) CHECK_FALSE(sig.inputs[0] == Sbp::split(1));
}

TEST_CASE("zigzag's errors name the axis, its length and the parts") {
  Status s = infer_error({2, 10}, {{"axis", int64_t{1}}, {"parts", int64_t{3}}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("multiple of 6") != std::string::npos);
  CHECK(s.message().find("[2, 10]") != std::string::npos);
  CHECK(infer_error({2, 8}, {{"parts", int64_t{0}}}).message().find("'parts' = 0") != std::string::npos);
  CHECK(infer_error({2, 8}, {{"axis", int64_t{2}}}).message().find("'axis' = 2") != std::string::npos);
  CHECK(infer_error({2, 8}, {{"inverse", int64_t{2}}}).message().find("'inverse' = 2") != std::string::npos);
}

}  // namespace rill
