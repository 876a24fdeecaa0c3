// The transformer's ops on CPU: batched and shared-weight matmul, a bias over
// several axes (the position table), gelu's tanh form, causal softmax with a
// scale, and layer_norm. Each: values against a direct loop, gradients
// against finite differences, every SBP signature against the single-device
// result on 2 and 3 pieces.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "kernels/ops/activation_math.h"
#include "kernels/ops/ops.h"
#include "tests/kernels/grad_check.h"
#include "tests/kernels/run_ok.h"
#include "tests/kernels/sbp_check.h"

namespace rill::testing {
namespace {

Attrs transposes(int a, int b) { return {{"transpose_a", int64_t{a}}, {"transpose_b", int64_t{b}}}; }

void check_sbp_2_and_3(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  EXPECT_OK(check_sbp_signatures(type, inputs, attrs, 2));
  EXPECT_OK(check_sbp_signatures(type, inputs, attrs, 3));
}

// Sums of at most 5 products of values in [-1, 1): float rounding is below
// 1e-6 of the double reference whatever the order or the GEMM kernel.
TEST_CASE("batched matmul: one product per leading index, every transpose") {
  const int64_t batch0 = 2, batch1 = 3, m = 4, k = 5, n = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta);
      CAPTURE(tb);
      const Tensor a = Tensor::uniform(ta ? Shape{batch0, batch1, k, m} : Shape{batch0, batch1, m, k}, 1 + ta);
      const Tensor b = Tensor::uniform(tb ? Shape{batch0, batch1, n, k} : Shape{batch0, batch1, k, n}, 3 + tb);
      const Tensor c = run_ok("matmul", {a, b}, transposes(ta, tb))[0];
      REQUIRE(c.shape == Shape{batch0, batch1, m, n});
      for (int64_t t = 0; t < batch0 * batch1; ++t)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = 0;
            for (int64_t p = 0; p < k; ++p)
              want += double(a.f32[t * m * k + (ta ? p * m + i : i * k + p)]) *
                      b.f32[t * k * n + (tb ? j * k + p : p * n + j)];
            CHECK(c.f32[(t * m + i) * n + j] == doctest::Approx(want).epsilon(1e-5));
          }
      EXPECT_OK(check_gradients("matmul", {a, b}, transposes(ta, tb), {0, 1}));
      check_sbp_2_and_3("matmul", {a, b}, transposes(ta, tb));
    }
}

TEST_CASE("a weight shared over leading axes: [B, T, C] x [C, N] is the matmul of the folded rows") {
  for (int tb = 0; tb < 2; ++tb) {
    CAPTURE(tb);
    const Tensor x = Tensor::uniform({2, 3, 4}, 5);
    const Tensor w = Tensor::uniform(tb ? Shape{5, 4} : Shape{4, 5}, 6);
    const Tensor y = run_ok("matmul", {x, w}, transposes(0, tb))[0];
    REQUIRE(y.shape == Shape{2, 3, 5});
    Tensor rows = x;
    rows.shape = {6, 4};
    const Tensor want = run_ok("matmul", {rows, w}, transposes(0, tb))[0];
    CHECK(y.f32 == want.f32);  // the same single GEMM
    EXPECT_OK(check_gradients("matmul", {x, w}, transposes(0, tb), {0, 1}));
    check_sbp_2_and_3("matmul", {x, w}, transposes(0, tb));
  }
}

// The shared weight's gradient: one GEMM over the folded rows, never a
// reshape (a reshape that merges a split batch axis would have to gather it).
TEST_CASE("fold_batch sums a^T b over every axis but the last, and splits of the rows give partial sums") {
  const Tensor a = Tensor::uniform({2, 3, 4}, 21), b = Tensor::uniform({2, 3, 5}, 22);
  const Attrs fold{{"transpose_a", int64_t{1}}, {"fold_batch", int64_t{1}}};
  const Tensor c = run_ok("matmul", {a, b}, fold)[0];
  REQUIRE(c.shape == Shape{4, 5});
  Tensor a2 = a, b2 = b;
  a2.shape = {6, 4};
  b2.shape = {6, 5};
  CHECK(c.f32 == run_ok("matmul", {a2, b2}, transposes(1, 0))[0].f32);
  check_sbp_2_and_3("matmul", {a, b}, fold);
  CHECK_FALSE(run_op("matmul", {a, b}, {{"fold_batch", int64_t{1}}}).ok());  // needs transpose_a
  // The shared weight's gradient rule uses it, and no reshape.
  const Tensor x = Tensor::uniform({2, 3, 4}, 23), w = Tensor::uniform({4, 5}, 24);
  auto y = run_op("matmul", {x, w});
  REQUIRE(y.ok());
  EagerGradBuilder builder("matmul", {}, {x, w}, *y, {Tensor::uniform({2, 3, 5}, 25)}, {true, true});
  REQUIRE(find_op("matmul")->grad(builder).ok());
  CHECK(builder.added_ops() == std::vector<std::string>{"matmul", "matmul"});
}

TEST_CASE("batched matmul refuses what it cannot compute, naming both shapes") {
  auto status = [](Shape a, Shape b, const Attrs& attrs = {}) {
    return run_op("matmul", {Tensor::zeros(std::move(a)), Tensor::zeros(std::move(b))}, attrs).status();
  };
  Status s = status({2, 3, 4}, {3, 4, 5});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("a [2, 3, 4] and b [3, 4, 5] differ in their leading (batch) axes") != std::string::npos);
  s = status({2, 3, 4}, {2, 5, 6});
  CHECK(s.message().find("do not agree on K (4 vs 5)") != std::string::npos);
  s = status({2, 4, 3}, {4, 5}, transposes(1, 0));
  CHECK(s.message().find("transpose_a on a batch needs a batched b") != std::string::npos);
  s = status({4}, {4, 5});
  CHECK(s.message().find("a must have 2 or more axes") != std::string::npos);
  s = status({2, 3}, {2, 3, 4});
  CHECK(s.code() == Code::kInvalidArgument);
}

TEST_CASE("reshape splits heads as it splits channels: [B, T, C] S(2) is [B, T, H, D] S(2)") {
  const Tensor x = Tensor::uniform({2, 3, 8}, 29);
  const Attrs heads{{"shape", std::vector<int64_t>{-1, 3, 4, 2}}};
  std::vector<SbpSignature> sigs = find_op("reshape")->sbp(heads, std::vector<TensorMeta>{x.meta()});
  auto offers = [&](int in, int out) {
    return std::count(sigs.begin(), sigs.end(), SbpSignature{{Sbp::split(in)}, {Sbp::split(out)}}) == 1;
  };
  CHECK(offers(0, 0));
  CHECK(offers(1, 1));
  CHECK(offers(2, 2));
  CHECK_FALSE(offers(2, 3));
  // Every signature moves each device's elements as they are (on 3 devices
  // the channel split does not line up with 4 heads: the compiler refuses it,
  // tests/compiler/gpt_plan_test.cc).
  check_sbp_2_and_3("reshape", {x}, heads);
  // A size-1 axis beside a split one is not its partner: [2, 3, 8] -> [2, 1, 3, 8].
  const Attrs unit{{"shape", std::vector<int64_t>{2, 1, 3, 8}}};
  sigs = find_op("reshape")->sbp(unit, std::vector<TensorMeta>{x.meta()});
  CHECK(offers(1, 2));
  CHECK_FALSE(offers(1, 1));
  check_sbp_2_and_3("reshape", {x}, unit);
  const Attrs merge{{"shape", std::vector<int64_t>{-1, 3, 8}}};
  const Tensor y = Tensor::uniform({2, 3, 4, 2}, 30);
  sigs = find_op("reshape")->sbp(merge, std::vector<TensorMeta>{y.meta()});
  CHECK(offers(2, 2));
  check_sbp_2_and_3("reshape", {y}, merge);
}

TEST_CASE("bias_add covers trailing axes by default: a [T, C] position table over [B, T, C]") {
  const Tensor x = Tensor::uniform({2, 3, 4}, 7), wpe = Tensor::uniform({3, 4}, 8), b = Tensor::uniform({4}, 9);
  const Tensor y = run_ok("bias_add", {x, wpe})[0];
  for (int64_t i = 0; i < x.size(); ++i) CHECK(y.f32[i] == x.f32[i] + wpe.f32[i % 12]);
  const Tensor yb = run_ok("bias_add", {x, b})[0];
  for (int64_t i = 0; i < x.size(); ++i) CHECK(yb.f32[i] == x.f32[i] + b.f32[i % 4]);
  EXPECT_OK(check_gradients("bias_add", {x, wpe}, {}, {0, 1}));
  check_sbp_2_and_3("bias_add", {x, wpe});
  check_sbp_2_and_3("bias_add", {x, Tensor::uniform({2, 3}, 10)}, {{"axis", int64_t{0}}});
  Status s = run_op("bias_add", {x, Tensor::zeros({4, 4})}).status();
  CHECK(s.message().find("b [4, 4] must be [3, 4], the axes 1 to 2 of x [2, 3, 4]") != std::string::npos);
}

TEST_CASE("gelu_tanh's tanh is a rational function within 4e-7 relative of tanh, odd, and +-1 in the tails") {
  double worst = 0;
  for (double x = -20; x <= 20; x += 1e-3) {
    const float xf = static_cast<float>(x);
    const double want = std::tanh(static_cast<double>(xf));
    if (std::fabs(want) > 1e-30) worst = std::max(worst, std::fabs(act::rational_tanh(xf) - want) / std::fabs(want));
    CHECK(act::rational_tanh(-xf) == -act::rational_tanh(xf));
  }
  CHECK(worst < 4e-7);
  CHECK(act::rational_tanh(30.0f) == doctest::Approx(1.0).epsilon(1e-7));
  CHECK(act::rational_tanh(0.0f) == 0.0f);
}

TEST_CASE("gelu_tanh is GPT-2's tanh form, and its gradient checks") {
  const Tensor x = Tensor::floats({5}, {-3.0f, -0.5f, 0.0f, 0.7f, 2.5f});
  const Tensor y = run_ok("gelu_tanh", {x})[0];
  for (int i = 0; i < 5; ++i) {
    const double v = x.f32[i];
    const double want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    CHECK(y.f32[i] == doctest::Approx(want).epsilon(1e-6));
  }
  EXPECT_OK(check_gradients("gelu_tanh", {Tensor::uniform({3, 5}, 11, -3, 3)}, {}, {0}));
  check_sbp_2_and_3("gelu_tanh", {Tensor::uniform({3, 5}, 11)});
  check_sbp_2_and_3("gelu_tanh_grad", {Tensor::uniform({3, 5}, 11), Tensor::uniform({3, 5}, 12)});
}

TEST_CASE("causal softmax: row q sees columns 0..q of scale * x; the rest are 0") {
  const int64_t t = 4;
  const Tensor x = Tensor::uniform({2, 3, t, t}, 13, -2, 2);
  const double scale = 0.35;
  const Attrs attrs{{"causal", int64_t{1}}, {"scale", scale}};
  const Tensor y = run_ok("softmax", {x}, attrs)[0];
  for (int64_t m = 0; m < 6; ++m)
    for (int64_t q = 0; q < t; ++q) {
      const float* xr = x.f32.data() + (m * t + q) * t;
      const float* yr = y.f32.data() + (m * t + q) * t;
      double sum = 0;
      for (int64_t c = 0; c <= q; ++c) sum += std::exp(scale * xr[c]);
      for (int64_t c = 0; c < t; ++c)
        CHECK(yr[c] == doctest::Approx(c <= q ? std::exp(scale * xr[c]) / sum : 0.0).epsilon(1e-6));
    }
  EXPECT_OK(check_gradients("softmax", {x}, attrs, {0}));
  check_sbp_2_and_3("softmax", {x}, attrs);
  check_sbp_2_and_3("softmax_grad", {y, Tensor::uniform(y.shape, 14)}, {{"scale", scale}});
  // The query axis splits when causal too (context parallelism): a piece's
  // rows start at its offset, which the SBP check above hands each piece.
  bool queries_split = false;
  for (const SbpSignature& sig : find_op("softmax")->sbp(attrs, std::vector<TensorMeta>{x.meta()}))
    queries_split = queries_split || sig.inputs[0] == Sbp::split(2);
  CHECK(queries_split);
  Status s = run_op("softmax", {Tensor::zeros({2, 4, 3})}, attrs).status();
  CHECK(s.message().find("must end in [T, S] (queries by keys) with T <= S") != std::string::npos);
  s = run_op("softmax", {x}, {{"scale", -1.0}}).status();
  CHECK(s.message().find("attr 'scale' is -1; it must be > 0") != std::string::npos);
}

// Means of 6 values of magnitude < 3 and their squares: f32 rounding stays
// within 1e-5 relative of the double reference on any CPU.
TEST_CASE("layer_norm: normalized rows with scale and shift, statistics out, gradients checked") {
  const int64_t c = 6;
  const Tensor x = Tensor::uniform({2, 3, c}, 15, -3, 3);
  const Tensor gamma = Tensor::uniform({c}, 16, 0.5f, 1.5f), beta = Tensor::uniform({c}, 17);
  const std::vector<Tensor> out = run_ok("layer_norm", {x, gamma, beta});
  REQUIRE(out[1].shape == Shape{2, 3});
  for (int64_t r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mean += x.f32[r * c + j] / double(c);
    for (int64_t j = 0; j < c; ++j) var += (x.f32[r * c + j] - mean) * (x.f32[r * c + j] - mean) / double(c);
    const double rstd = 1 / std::sqrt(var + 1e-5);
    CHECK(out[1].f32[r] == doctest::Approx(mean).epsilon(1e-5));
    CHECK(out[2].f32[r] == doctest::Approx(rstd).epsilon(1e-5));
    for (int64_t j = 0; j < c; ++j)
      CHECK(out[0].f32[r * c + j] ==
            doctest::Approx((x.f32[r * c + j] - mean) * rstd * gamma.f32[j] + beta.f32[j]).epsilon(1e-5));
  }
  GradCheckOptions y_only;  // mean and rstd are saved for the gradient, not differentiated
  y_only.differentiable_outputs = 1;
  EXPECT_OK(check_gradients("layer_norm", {x, gamma, beta}, {}, {0, 1, 2}, y_only));
  check_sbp_2_and_3("layer_norm", {x, gamma, beta});
  check_sbp_2_and_3("layer_norm_grad", {Tensor::uniform(x.shape, 18), x, out[1], out[2], gamma});
  Status s = run_op("layer_norm", {x, Tensor::zeros({5}), beta}).status();
  CHECK(s.message().find("gamma [5] (f32) must be f32 [6], the last axis of x [2, 3, 6]") != std::string::npos);
  s = run_op("layer_norm", {x, gamma, beta}, {{"eps", 0.0}}).status();
  CHECK(s.message().find("attr 'eps' is 0; it must be > 0") != std::string::npos);
}

TEST_CASE("cross-entropy and accuracy take a language model's [B, T, V] logits and [B, T] targets") {
  const Tensor logits = Tensor::uniform({2, 3, 5}, 19, -2, 2);
  const Tensor labels = Tensor::ints({2, 3}, {0, 4, 2, 1, 3, 3});
  const Tensor loss = run_ok("sparse_softmax_cross_entropy", {logits, labels})[0];
  REQUIRE(loss.shape == Shape{2, 3});
  Tensor rows = logits, flat = labels;
  rows.shape = {6, 5};
  flat.shape = {6};
  CHECK(loss.f32 == run_ok("sparse_softmax_cross_entropy", {rows, flat})[0].f32);  // row by row, the same math
  CHECK(run_ok("accuracy", {logits, labels})[0].f32 == run_ok("accuracy", {rows, flat})[0].f32);
  EXPECT_OK(check_gradients("sparse_softmax_cross_entropy", {logits, labels}, {}, {0}));
  check_sbp_2_and_3("sparse_softmax_cross_entropy", {logits, labels});
  check_sbp_2_and_3("sparse_softmax_cross_entropy_grad", {logits, labels, Tensor::uniform({2, 3}, 20)});
  check_sbp_2_and_3("accuracy", {logits, labels});
  Status s = run_op("sparse_softmax_cross_entropy", {logits, Tensor::ints({6}, {0, 0, 0, 0, 0, 0})}).status();
  CHECK(s.message().find("logits [2, 3, 5] must be [..., C] and labels [6] the leading axes") != std::string::npos);
}

// Sums of at most 12 squares of values in [-1, 1), in double: exact to far
// below the 1e-6 compared.
TEST_CASE("clipping by the global norm: sum_squares, add_n, clip_factor") {
  const Tensor x = Tensor::uniform({3, 4}, 26);
  double want = 0;
  for (float v : x.f32) want += double(v) * v;
  CHECK(run_ok("sum_squares", {x})[0].f32[0] == doctest::Approx(want).epsilon(1e-6));
  check_sbp_2_and_3("sum_squares", {x});
  const Tensor y = Tensor::uniform({3, 4}, 27), z = Tensor::uniform({3, 4}, 28);
  const Tensor sum = run_ok("add_n", {x, y, z})[0];
  for (size_t i = 0; i < sum.f32.size(); ++i) CHECK(sum.f32[i] == (x.f32[i] + y.f32[i]) + z.f32[i]);
  check_sbp_2_and_3("add_n", {x, y, z});
  EXPECT_OK(check_gradients("add_n", {x, y}, {}, {0, 1}));
  // norm 5 over max_norm 2: every gradient scaled by 2 / 5; under the limit, by 1.
  std::vector<Tensor> out = run_ok("clip_factor", {Tensor::floats({}, {25.0f})}, {{"max_norm", 2.0}});
  CHECK(out[0].f32[0] == doctest::Approx(2.0 / (5.0 + 1e-6)).epsilon(1e-7));
  CHECK(out[1].f32[0] == 5.0f);
  CHECK(run_ok("clip_factor", {Tensor::floats({}, {1.0f})}, {{"max_norm", 2.0}})[0].f32[0] == 1.0f);
  CHECK(run_op("clip_factor", {Tensor::floats({}, {1.0f})}).status().message().find("max_norm") !=
        std::string::npos);
  CHECK(run_op("add_n", {x, Tensor::zeros({4, 3})}).status().message().find("input 1 is f32 [4, 3]") !=
        std::string::npos);
}


// The fused bias_add + gelu_tanh (compiler/fusion.h makes it): each element
// is the same float operations in the same order, so bit for bit the pair's
// values and gradients; its own gradient against finite differences; every
// SBP signature (x split on any axis, b whole or split with x's last axis)
// against the whole on 2 and 3 pieces.
TEST_CASE("bias_gelu_tanh is bias_add then gelu_tanh, bit for bit, and its gradient checks") {
  const Tensor x = Tensor::uniform({2, 5, 6}, 41, -3.0f, 3.0f);
  const Tensor b = Tensor::uniform({6}, 42);
  auto fused = run_op("bias_gelu_tanh", {x, b});
  REQUIRE(fused.ok());
  auto sum = run_op("bias_add", {x, b});
  REQUIRE(sum.ok());
  auto pair = run_op("gelu_tanh", {(*sum)[0]});
  REQUIRE(pair.ok());
  CHECK((*fused)[0].f32 == (*pair)[0].f32);
  const Tensor dy = Tensor::uniform({2, 5, 6}, 43);
  auto dx = run_op("bias_gelu_tanh_grad", {x, b, dy});
  REQUIRE(dx.ok());
  auto pair_dx = run_op("gelu_tanh_grad", {(*sum)[0], dy});
  REQUIRE(pair_dx.ok());
  CHECK((*dx)[0].f32 == (*pair_dx)[0].f32);
  EXPECT_OK(check_gradients("bias_gelu_tanh", {x, b}, {}, {0, 1}));
  check_sbp_2_and_3("bias_gelu_tanh", {x, b});
  check_sbp_2_and_3("bias_gelu_tanh_grad", {x, b, dy});
  // b covers exactly the last axis.
  std::vector<TensorMeta> out;
  Status wrong = infer_op(*find_op("bias_gelu_tanh"), {}, std::vector<TensorMeta>{{{2, 6}}, {{5}}}, &out);
  CHECK(wrong.message().find("b [5] must be [N], the last axis of x [2, 6]") != std::string::npos);
}

}  // namespace
}  // namespace rill::testing
