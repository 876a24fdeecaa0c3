// dropout: inverted scaling, the rate it drops at, a mask that depends on
// the element's place, the step, the micro-batch and the seed only (so
// every split of a tensor drops the same elements as one device), and a
// gradient that is the same mask again.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/kernels/grad_check.h"
#include "tests/kernels/sbp_check.h"

namespace rill::testing {
namespace {

Tensor dropout(const Tensor& x, double rate, int64_t seed, int64_t step = 0, int micro = 0, Shape logical = {}) {
  RunOptions options;
  options.step = step;
  options.micro = micro;
  if (!logical.empty()) options.logical_inputs = {logical};
  auto out = run_op("dropout", {x}, {{"rate", rate}, {"seed", seed}}, options);
  INFO(out.status().to_string());
  REQUIRE(out.ok());
  return (*out)[0];
}

// How many elements of a and b differ in whether they are zero.
int64_t masks_differ(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.size(); ++i) n += (a.f32[i] == 0.0f) != (b.f32[i] == 0.0f);
  return n;
}

TEST_CASE("dropout keeps x / (1 - p) and drops p of the elements") {
  // x in [1, 2): no kept element is 0. 200,000 draws: the dropped fraction's
  // standard deviation is sqrt(p (1 - p) / n) < 1.2e-3, so 0.01 is over 8
  // of them (and the hash is fixed: the count is the same on every CPU).
  const Tensor x = Tensor::uniform({400, 500}, 3, 1.0f, 2.0f);
  for (double rate : {0.1, 0.5, 0.9}) {
    CAPTURE(rate);
    const Tensor y = dropout(x, rate, 7);
    const auto scale = static_cast<float>(1.0 / (1.0 - rate));
    int64_t dropped = 0, wrong = 0;
    for (int64_t i = 0; i < x.size(); ++i) {
      if (y.f32[i] == 0.0f) ++dropped;
      else wrong += y.f32[i] != x.f32[i] * scale;
    }
    CHECK(wrong == 0);
    CHECK(std::abs(static_cast<double>(dropped) / static_cast<double>(x.size()) - rate) < 0.01);
  }
  const Tensor same = dropout(x, 0.0, 7);
  CHECK(same.f32 == x.f32);
}

TEST_CASE("dropout's mask follows the seed, the step and the micro-batch, and nothing else") {
  const Tensor x = Tensor::uniform({64, 32}, 5, 1.0f, 2.0f);
  const Tensor y = dropout(x, 0.5, 1, 3);
  CHECK(masks_differ(y, dropout(x, 0.5, 1, 3)) == 0);   // the same step again (the backward pass)
  CHECK(masks_differ(y, dropout(x, 0.5, 2, 3)) > 600);  // another seed: about half of 2048 differ
  CHECK(masks_differ(y, dropout(x, 0.5, 1, 4)) > 600);  // the next step
  // A step's batch as two micro-batches of 32 rows: each continues the
  // count where the one before ends, so the mask is the whole batch's.
  const Tensor top = split_piece(x, 0, 2, 0), bottom = split_piece(x, 0, 2, 1);
  const Tensor joined = concat_pieces({dropout(top, 0.5, 1, 3, 0, {32, 32}), dropout(bottom, 0.5, 1, 3, 1, {32, 32})}, 0);
  CHECK(joined.f32 == y.f32);
}

TEST_CASE("dropout drops the same elements however the tensor is split, and its gradient is the same mask") {
  // Every signature (a split of each axis, B, P) against one device on 2
  // and 3 pieces: the pieces read their place from input_offsets.
  const Tensor x = Tensor::uniform({4, 6, 5}, 9);
  const Attrs attrs{{"rate", 0.3}, {"seed", int64_t{11}}};
  EXPECT_OK(check_sbp_signatures("dropout", {x}, attrs, 2));
  EXPECT_OK(check_sbp_signatures("dropout", {x}, attrs, 3));
  // Linear in x for a fixed mask: central differences are exact up to rounding.
  EXPECT_OK(check_gradients("dropout", {Tensor::uniform({3, 7}, 4)}, attrs, {0}));
}

TEST_CASE("dropout refuses a rate outside [0, 1), a seed that is no integer, and integer input") {
  const Tensor x = Tensor::uniform({2, 3}, 1);
  for (double rate : {-0.1, 1.0, 1.5}) {
    auto out = run_op("dropout", {x}, {{"rate", rate}});
    REQUIRE_FALSE(out.ok());
    CHECK(out.status().message().find("must be in [0, 1)") != std::string::npos);
  }
  CHECK_FALSE(run_op("dropout", {x}, {{"seed", 0.5}}).ok());
  CHECK_FALSE(run_op("dropout", {Tensor::ints({2}, {1, 2})}, {}).ok());
}

}  // namespace
}  // namespace rill::testing
