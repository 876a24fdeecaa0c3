// The mixture of experts' ops (kernels/ops/moe.cc): routing by hand-worked
// cases (top-1 and top-2, capacity and drops, normalized gates),
// dispatch and combine against a direct loop, gradients against finite
// differences, every SBP signature on 2 and 3 pieces, bad slots refused.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/ops/ops.h"
#include "tests/kernels/grad_check.h"
#include "tests/kernels/run_ok.h"
#include "tests/kernels/sbp_check.h"

namespace rill::testing {
namespace {

// Logits whose experts are far apart (gaps of 0.3 and more), so that a
// finite-difference step of 1e-2 never changes which experts a token takes.
Tensor spread_logits(int64_t groups, int64_t s, int64_t e, uint64_t seed) {
  Tensor t = Tensor::zeros({groups, s, e});
  Tensor noise = Tensor::uniform({groups, s, e}, seed, 0.0f, 0.1f);
  for (int64_t r = 0; r < groups * s; ++r)
    for (int64_t i = 0; i < e; ++i) {
      const int64_t rank = (r + i) % e;  // a permutation of the experts, another each row
      t.f32[r * e + i] = 0.4f * static_cast<float>(rank) + noise.f32[r * e + i];
    }
  return t;
}

TEST_CASE("moe_route: the top expert, places in token order, drops past the capacity") {
  // 4 tokens, 2 experts, capacity 2: tokens 0, 1 and 3 choose expert 0,
  // token 2 expert 1; token 3 finds expert 0 full.
  const Tensor logits = Tensor::floats({1, 4, 2}, {2, 0, 1, 0, 0, 3, 5, 1});
  auto out = run_ok("moe_route", {logits}, {{"k", int64_t{1}}, {"capacity", int64_t{2}}});
  CHECK(out[1].i32 == std::vector<int32_t>{0, 1, 2, -1});
  CHECK(out[2].f32 == std::vector<float>{1.0f});
  // Switch's top-1 gate: the expert's softmax probability, not 1.
  CHECK(out[0].f32[0] == doctest::Approx(1.0 / (1.0 + std::exp(-2.0))).epsilon(1e-6));
  CHECK(out[0].f32[2] == doctest::Approx(1.0 / (1.0 + std::exp(-3.0))).epsilon(1e-6));
}

TEST_CASE("moe_route: top-2 gates sum to one, and second choices come after every first choice") {
  // 3 experts, capacity 2; first choices: 0, 0, 1; second: 1, 2, 0. Expert
  // 0 takes tokens 0 and 1 first, so token 2's second choice is dropped.
  const Tensor logits = Tensor::floats({1, 3, 3}, {3, 2, 0, 3, 0, 2, 2, 3, 0});
  auto out = run_ok("moe_route", {logits}, {{"k", int64_t{2}}, {"capacity", int64_t{2}}});
  CHECK(out[1].i32 == std::vector<int32_t>{0, 3, 1, 4, 2, -1});
  CHECK(out[2].f32 == std::vector<float>{1.0f});
  for (int t = 0; t < 3; ++t) CHECK(out[0].f32[t * 2] + out[0].f32[t * 2 + 1] == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(out[0].f32[0] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));
  // Capacity 3 = the group's tokens: nothing dropped.
  auto dropless = run_ok("moe_route", {logits}, {{"k", int64_t{2}}, {"capacity", int64_t{3}}});
  CHECK(dropless[1].i32 == std::vector<int32_t>{0, 4, 1, 6, 3, 2});
  CHECK(dropless[2].f32 == std::vector<float>{0.0f});
}

TEST_CASE("moe_dispatch and moe_combine move each token to its slots and back, weighted") {
  const int64_t groups = 2, s = 3, d = 4, e = 3, capacity = 3;  // 6 choices a group, 9 places
  const Tensor x = Tensor::uniform({groups, s, d}, 3);
  const Tensor logits = spread_logits(groups, s, e, 5);
  auto routed = run_ok("moe_route", {logits}, {{"k", int64_t{2}}, {"capacity", capacity}});
  const Tensor& gates = routed[0];
  const Tensor& slots = routed[1];
  const Attrs sizes = {{"experts", e}, {"capacity", capacity}};
  auto y = run_ok("moe_dispatch", {x, slots, gates}, sizes)[0];
  CHECK(y.shape == Shape{e, groups, capacity, d});
  auto back = run_ok("moe_combine", {y, slots, gates})[0];
  // Each kept choice carries gate * x there and gate * gate * x back.
  for (int64_t t = 0; t < groups * s; ++t)
    for (int64_t i = 0; i < d; ++i) {
      double want = 0;
      for (int j = 0; j < 2; ++j)
        if (slots.i32[t * 2 + j] >= 0) want += double(gates.f32[t * 2 + j]) * gates.f32[t * 2 + j] * x.f32[t * d + i];
      CHECK(back.f32[t * d + i] == doctest::Approx(want).epsilon(1e-6));
    }
  // A place no token took holds zeros.
  int64_t empty = 0;
  for (float v : y.f32) empty += v == 0.0f;
  CHECK(empty > 0);
}

TEST_CASE("the mixture of experts' gradients agree with finite differences") {
  const int64_t groups = 2, s = 3, d = 4, e = 3, capacity = 2;
  for (int64_t k : {1, 2}) {
    CAPTURE(k);
    const Attrs route = {{"k", k}, {"capacity", capacity}};
    GradCheckOptions only_gates;
    only_gates.differentiable_outputs = 1;
    EXPECT_OK(check_gradients("moe_route", {spread_logits(groups, s, e, 9)}, route, {0}, only_gates));
    const Tensor slots = run_ok("moe_route", {spread_logits(groups, s, e, 9)}, route)[1];
    const Tensor w = Tensor::uniform({groups, s, k}, 11);
    EXPECT_OK(check_gradients("moe_dispatch", {Tensor::uniform({groups, s, d}, 12), slots, w},
                              {{"experts", e}, {"capacity", capacity}}, {0, 2}));
    EXPECT_OK(check_gradients("moe_combine", {Tensor::uniform({e, groups, capacity, d}, 13), slots, w}, {}, {0, 2}));
    EXPECT_OK(check_gradients("moe_combine", {Tensor::uniform({e, groups, capacity, d}, 14), slots}, {}, {0}));
  }
}

TEST_CASE("every mixture of experts' SBP signature gives the single-device result on 2 and 3 pieces") {
  const int64_t groups = 6, s = 3, d = 6, e = 3, capacity = 2;
  const Tensor logits = spread_logits(groups, s, e, 21);
  const Attrs route = {{"k", int64_t{2}}, {"capacity", capacity}};
  auto routed = run_ok("moe_route", {logits}, route);
  const Tensor x = Tensor::uniform({groups, s, d}, 22), y = Tensor::uniform({e, groups, capacity, d}, 23);
  const Attrs sizes = {{"experts", e}, {"capacity", capacity}};
  for (int parallel : {2, 3}) {
    CAPTURE(parallel);
    EXPECT_OK(check_sbp_signatures("moe_route", {logits}, route, parallel));
    EXPECT_OK(check_sbp_signatures("moe_route_grad", {logits, routed[0]}, route, parallel));
    EXPECT_OK(check_sbp_signatures("moe_dispatch", {x, routed[1], routed[0]}, sizes, parallel));
    EXPECT_OK(check_sbp_signatures("moe_dispatch", {x, routed[1]}, sizes, parallel));
    EXPECT_OK(check_sbp_signatures("moe_combine", {y, routed[1], routed[0]}, {}, parallel));
    EXPECT_OK(check_sbp_signatures("moe_gate_grad", {y, routed[1], x}, {}, parallel));
  }
}

TEST_CASE("the mixture of experts' ops refuse bad attrs, shapes and slots, naming them") {
  const Tensor logits = Tensor::floats({1, 2, 2}, {1, 0, 0, 1});
  auto k3 = run_op("moe_route", {logits}, {{"k", int64_t{3}}, {"capacity", int64_t{1}}});
  CHECK(k3.status().message().find("attr 'k' is 3") != std::string::npos);
  auto no_capacity = run_op("moe_route", {logits}, {{"k", int64_t{1}}});
  CHECK(no_capacity.status().message().find("attr 'capacity'") != std::string::npos);
  auto flat = run_op("moe_route", {Tensor::floats({2, 2}, {1, 0, 0, 1})}, {{"capacity", int64_t{1}}});
  CHECK(flat.status().message().find("[groups, tokens, experts]") != std::string::npos);
  const Tensor x = Tensor::uniform({1, 2, 3}, 1);
  auto bad = run_op("moe_dispatch", {x, Tensor::ints({1, 2, 1}, {0, 7})}, {{"experts", int64_t{2}}, {"capacity", int64_t{2}}});
  CHECK(bad.status().message().find("slot 7 at position 1 is outside [-1, 4)") != std::string::npos);
  auto shapes = run_op("moe_dispatch", {x, Tensor::ints({1, 3, 1}, {0, 1, 2})}, {{"experts", int64_t{2}}, {"capacity", int64_t{2}}});
  CHECK(shapes.status().message().find("slots must be i32 [1, 2, k]") != std::string::npos);
}

}  // namespace
}  // namespace rill::testing

namespace rill::testing {
namespace {

TEST_CASE("the router's losses: balance is 1 when balanced and E when one expert takes all; z is mean lse squared") {
  // Two experts, equal logits: f = (1, 0) (ties go to the lower index), P =
  // (1/2, 1/2): 2 (1 * 1/2) = 1. One expert far ahead on every token: f =
  // (1, 0), P = (1, 0): 2.
  const Tensor even = Tensor::floats({1, 2, 2}, {0, 0, 0, 0});
  CHECK(run_ok("moe_balance_loss", {even})[0].f32[0] == doctest::Approx(1.0).epsilon(1e-6));
  const Tensor one = Tensor::floats({1, 2, 2}, {40, 0, 40, 0});
  CHECK(run_ok("moe_balance_loss", {one})[0].f32[0] == doctest::Approx(2.0).epsilon(1e-6));
  // z: logsumexp of (0, 0) is ln 2.
  CHECK(run_ok("moe_z_loss", {even})[0].f32[0] == doctest::Approx(std::log(2.0) * std::log(2.0)).epsilon(1e-6));
  const Tensor logits = spread_logits(6, 3, 3, 31);
  for (const char* op : {"moe_balance_loss", "moe_z_loss"}) {
    CAPTURE(op);
    EXPECT_OK(check_gradients(op, {logits}, {}, {0}));
    for (int parallel : {2, 3}) {
      EXPECT_OK(check_sbp_signatures(op, {logits}, {}, parallel));
      EXPECT_OK(check_sbp_signatures(std::string(op) + "_grad", {logits, Tensor::uniform({6}, 32)}, {}, parallel));
    }
  }
}

}  // namespace
}  // namespace rill::testing
