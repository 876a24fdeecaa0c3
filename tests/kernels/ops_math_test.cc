// Forward values, error messages and registry completeness of the math ops
// (matmul, elementwise, activations, softmax, losses, reductions, accuracy).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <string>
#include <set>

#include "kernels/cuda_kernels.h"
#include "kernels/ops/activation_math.h"
#include "kernels/ops/cpu_clones.h"
#include "kernels/ops/exp_math.h"
#include "kernels/ops/ops.h"
#include "tests/kernels/grad_check.h"
#include "tests/kernels/run_ok.h"

namespace rill::testing {
namespace {

Status run_status(const std::string& type, std::vector<Tensor> inputs, const Attrs& attrs = {}) {
  return run_op(type, std::move(inputs), attrs).status();
}

void check_values(const Tensor& got, const Shape& shape, const std::vector<float>& want, double tol = 1e-5) {
  REQUIRE(got.shape == shape);
  REQUIRE(got.f32.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element ", i);
    CHECK(got.f32[i] == doctest::Approx(want[i]).epsilon(tol));
  }
}

Attrs transposes(int a, int b) { return {{"transpose_a", int64_t{a}}, {"transpose_b", int64_t{b}}}; }

// a = [[1, 2, 3], [4, 5, 6]], b = [[1, 0], [0, 1], [1, 1]]: a x b = [[4, 5], [10, 11]].
TEST_CASE("matmul computes all four transpose combinations") {
  const Tensor a = Tensor::floats({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor a_t = Tensor::floats({3, 2}, {1, 4, 2, 5, 3, 6});
  const Tensor b = Tensor::floats({3, 2}, {1, 0, 0, 1, 1, 1});
  const Tensor b_t = Tensor::floats({2, 3}, {1, 0, 1, 0, 1, 1});
  const std::vector<float> want = {4, 5, 10, 11};
  check_values(run_ok("matmul", {a, b}, transposes(0, 0))[0], {2, 2}, want);
  check_values(run_ok("matmul", {a, b_t}, transposes(0, 1))[0], {2, 2}, want);
  check_values(run_ok("matmul", {a_t, b}, transposes(1, 0))[0], {2, 2}, want);
  check_values(run_ok("matmul", {a_t, b_t}, transposes(1, 1))[0], {2, 2}, want);
}

// Gradient accumulation's weight gradients: with micro_batches K the kernel
// writes a b / K at micro-batch 0 and adds a b / K after, into one output.
// Each term's product is exact in float ((0.5 + i) / 4 products of small
// halves), so the sums are compared exactly against the same sums in double.
TEST_CASE("matmul with micro_batches averages its micro-batches' products into one output") {
  const Attrs four{{"transpose_a", int64_t{1}}, {"micro_batches", int64_t{4}}};
  std::vector<Tensor> acc;
  std::vector<double> want(6, 0.0);
  for (int micro = 0; micro < 4; ++micro) {
    std::vector<float> av(2 * 3), bv(2 * 2);
    for (size_t i = 0; i < av.size(); ++i) av[i] = 0.5f + static_cast<float>((i + micro) % 5);
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(micro) - 1.5f * static_cast<float>(i);
    const Tensor a = Tensor::floats({2, 3}, av), b = Tensor::floats({2, 2}, bv);
    for (int m = 0; m < 3; ++m)
      for (int n = 0; n < 2; ++n)
        for (int k = 0; k < 2; ++k) want[m * 2 + n] += double(av[k * 3 + m]) * bv[k * 2 + n] / 4.0;
    RunOptions options;
    options.micro = micro;
    options.outputs = micro == 0 ? nullptr : &acc;  // micro-batch 0 starts from garbage (NaN)
    acc = run_ok("matmul", {a, b}, four, options);
  }
  REQUIRE(acc[0].shape == Shape{3, 2});
  for (size_t i = 0; i < want.size(); ++i) CHECK(acc[0].f32[i] == want[i]);
  // An empty piece along K adds nothing after micro-batch 0 and writes zeros at it.
  const Tensor a0 = Tensor::floats({0, 3}, {}), b0 = Tensor::floats({0, 2}, {});
  RunOptions later;
  later.micro = 1;
  later.outputs = &acc;
  CHECK(run_ok("matmul", {a0, b0}, four, later)[0].f32 == acc[0].f32);
  const std::vector<Tensor> zeros = run_ok("matmul", {a0, b0}, four);
  for (float v : zeros[0].f32) CHECK(v == 0.0f);
  CHECK(run_status("matmul", {a0, b0}, {{"micro_batches", int64_t{0}}}).message().find("micro_batches is 0") !=
        std::string::npos);
}

TEST_CASE("matmul agrees with a reference loop on a non-square product") {
  const Tensor a = Tensor::uniform({7, 13}, 1), b = Tensor::uniform({13, 5}, 2);
  const Tensor c = run_ok("matmul", {a, b})[0];
  REQUIRE(c.shape == Shape{7, 5});
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 5; ++j) {
      double want = 0;
      for (int k = 0; k < 13; ++k) want += double(a.f32[i * 13 + k]) * b.f32[k * 5 + j];
      CHECK(c.f32[i * 5 + j] == doctest::Approx(want).epsilon(1e-5));
    }
}

TEST_CASE("matmul reports shape and attr errors with both shapes") {
  Status s = run_status("matmul", {Tensor::zeros({2, 3}), Tensor::zeros({4, 5})});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("matmul") != std::string::npos);
  CHECK(s.message().find("a [2, 3] and b [4, 5] do not agree on K (3 vs 4)") != std::string::npos);
  s = run_status("matmul", {Tensor::zeros({2, 3}), Tensor::zeros({2, 5})}, transposes(0, 1));
  CHECK(s.message().find("transpose_b=1") != std::string::npos);
  s = run_status("matmul", {Tensor::zeros({2, 3, 1}), Tensor::zeros({3, 5})});
  CHECK(s.message().find("[2, 3, 1]") != std::string::npos);
  s = run_status("matmul", {Tensor::zeros({2, 3}), Tensor::zeros({3, 5})}, {{"transpose_a", std::string("yes")}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("transpose_a") != std::string::npos);
  s = run_status("matmul", {Tensor::zeros({2, 3}), Tensor::zeros({3, 5})}, {{"transpose_a", int64_t{2}}});
  CHECK(s.code() == Code::kInvalidArgument);
}

TEST_CASE("add, sub and mul work elementwise and with a scalar second input") {
  const Tensor x = Tensor::floats({2, 2}, {1, 2, 3, 4});
  const Tensor y = Tensor::floats({2, 2}, {10, 20, 30, 40});
  check_values(run_ok("add", {x, y})[0], {2, 2}, {11, 22, 33, 44});
  check_values(run_ok("sub", {x, y})[0], {2, 2}, {-9, -18, -27, -36});
  check_values(run_ok("mul", {x, y})[0], {2, 2}, {10, 40, 90, 160});
  check_values(run_ok("add", {x, Tensor::floats({}, {0.5f})})[0], {2, 2}, {1.5f, 2.5f, 3.5f, 4.5f});
  check_values(run_ok("mul", {x, Tensor::floats({1}, {2})})[0], {2, 2}, {2, 4, 6, 8});
  Status s = run_status("add", {x, Tensor::zeros({2, 3})});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("[2, 2] and x1 [2, 3]") != std::string::npos);
  CHECK(run_status("add", {x, Tensor::ints({2, 2}, {1, 2, 3, 4})}).code() == Code::kInvalidArgument);
}

TEST_CASE("bias_add adds along its axis and checks the bias shape") {
  const Tensor x = Tensor::floats({2, 3}, {0, 0, 0, 1, 1, 1});
  check_values(run_ok("bias_add", {x, Tensor::floats({3}, {1, 2, 3})})[0], {2, 3}, {1, 2, 3, 2, 3, 4});
  check_values(run_ok("bias_add", {x, Tensor::floats({2}, {5, 7})}, {{"axis", int64_t{0}}})[0], {2, 3},
               {5, 5, 5, 8, 8, 8});
  Status s = run_status("bias_add", {x, Tensor::zeros({4})});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("[4]") != std::string::npos);
  CHECK(s.message().find("[2, 3]") != std::string::npos);
}

TEST_CASE("activations match their formulas") {
  const Tensor x = Tensor::floats({4}, {-2, -0.5f, 0.5f, 2});
  std::vector<float> relu, gelu, tanh_, sigmoid;
  for (float v : x.f32) {
    relu.push_back(v > 0 ? v : 0);
    gelu.push_back(0.5f * v * (1 + std::erf(v / std::sqrt(2.0f))));
    tanh_.push_back(std::tanh(v));
    sigmoid.push_back(1 / (1 + std::exp(-v)));
  }
  check_values(run_ok("relu", {x})[0], {4}, relu);
  check_values(run_ok("gelu", {x})[0], {4}, gelu);
  check_values(run_ok("tanh", {x})[0], {4}, tanh_);
  check_values(run_ok("sigmoid", {x})[0], {4}, sigmoid);
  CHECK(run_ok("gelu", {Tensor::floats({1}, {1})})[0].f32[0] == doctest::Approx(0.8413447));
}

// The activation loops, bias_gelu_tanh's too, are compiled for AVX-512, AVX2
// and the baseline (kernels/ops/cpu_clones.h), and a CPU runs the best copy
// it can (the CI machine and the GPU hosts the AVX-512 one). Here every
// copy this CPU can execute runs in turn, and each element must be the bits
// of the scalar formula, computed here one call at a time in the baseline's
// code: a copy that fused a multiply and an add, or reordered the math,
// would differ in the last bits somewhere in 100,003 values spread over
// GELU's range (an odd count: the vector loops' tails too). A copy this CPU
// cannot execute is reported skipped.
TEST_CASE("every copy of the activation kernels this CPU can run gives the scalar formula's bits") {
  const int64_t n = 100003, rows = 7, cols = 14285;  // bias_gelu_tanh's x: [7, 14285], rows of odd length
  std::vector<float> xs(static_cast<size_t>(n)), dys(static_cast<size_t>(n)), bs(static_cast<size_t>(cols));
  for (int64_t i = 0; i < n; ++i) {
    xs[static_cast<size_t>(i)] = -9.0f + 18.0f * static_cast<float>(i) / static_cast<float>(n);
    dys[static_cast<size_t>(i)] = 0.25f + static_cast<float>(i % 7) * 0.125f;
  }
  for (int64_t j = 0; j < cols; ++j) bs[static_cast<size_t>(j)] = -0.5f + static_cast<float>(j % 11) * 0.1f;
  const Tensor x = Tensor::floats({n}, xs), dy = Tensor::floats({n}, dys);
  const std::vector<float> xs2(xs.begin(), xs.begin() + rows * cols), dys2(dys.begin(), dys.begin() + rows * cols);
  const Tensor x2 = Tensor::floats({rows, cols}, xs2), dy2 = Tensor::floats({rows, cols}, dys2);
  const Tensor b = Tensor::floats({cols}, bs);
  auto check = [&]<act::Act kAct>(const std::string& op, const std::string& grad) {
    CAPTURE(op);
    const Tensor y = run_ok(op, {x})[0];
    const Tensor dx = run_ok(grad, {x, dy})[0];
    int64_t forward_wrong = 0, backward_wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      forward_wrong += y.f32[k] != act::forward<kAct>(xs[k]);
      backward_wrong += dx.f32[k] != act::backward<kAct>(xs[k], dys[k]);
    }
    CHECK(forward_wrong == 0);
    CHECK(backward_wrong == 0);
  };
  int copies = 0;
  for (const cpu_clones::Isa isa : cpu_clones::kIsas) {
    const std::string copy = cpu_clones::isa_name(isa);
    CAPTURE(copy);
    if (!cpu_clones::cpu_runs(isa)) {
      MESSAGE("skipped the ", copy, " copy of the activation loops: this CPU cannot execute it");
      continue;
    }
    const cpu_clones::ScopedIsaForTesting use(isa);
    REQUIRE(cpu_clones::active_isa() == isa);
    ++copies;
    check.operator()<act::Act::kGeluTanh>("gelu_tanh", "gelu_tanh_grad");
    check.operator()<act::Act::kGelu>("gelu", "gelu_grad");
    check.operator()<act::Act::kRelu>("relu", "relu_grad");
    check.operator()<act::Act::kTanh>("tanh", "tanh_grad");
    check.operator()<act::Act::kSigmoid>("sigmoid", "sigmoid_grad");
    // bias_gelu_tanh's row loops: gelu_tanh of the float sum x + b.
    const Tensor y = run_ok("bias_gelu_tanh", {x2, b})[0];
    const Tensor dx = run_ok("bias_gelu_tanh_grad", {x2, b, dy2})[0];
    int64_t forward_wrong = 0, backward_wrong = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const auto k = static_cast<size_t>(r * cols + j);
        const float s = xs2[k] + bs[static_cast<size_t>(j)];
        forward_wrong += y.f32[k] != act::forward<act::Act::kGeluTanh>(s);
        backward_wrong += dx.f32[k] != act::backward<act::Act::kGeluTanh>(s, dys2[k]);
      }
    CHECK(forward_wrong == 0);
    CHECK(backward_wrong == 0);
  }
  CHECK(cpu_clones::active_isa() == cpu_clones::best_isa());
  MESSAGE("ran ", copies, " of ", std::size(cpu_clones::kIsas), " copies of the activation loops; this CPU's own: ",
          std::string(cpu_clones::isa_name(cpu_clones::best_isa())));
}

TEST_CASE("RILL_CPU_ISA caps the copy of the loops picked, never above what the CPU runs") {
  using cpu_clones::Isa;
  CHECK(cpu_clones::parse_isa("avx512") == Isa::kAvx512);
  CHECK(cpu_clones::parse_isa("avx2") == Isa::kAvx2);
  CHECK(cpu_clones::parse_isa("baseline") == Isa::kBaseline);
  CHECK_FALSE(cpu_clones::parse_isa("AVX2").has_value());
  CHECK_FALSE(cpu_clones::parse_isa("sse4").has_value());
  CHECK(cpu_clones::best_isa_up_to(Isa::kBaseline) == Isa::kBaseline);
  CHECK(cpu_clones::best_isa_up_to(Isa::kAvx2) == (cpu_clones::cpu_runs(Isa::kAvx2) ? Isa::kAvx2 : Isa::kBaseline));
  const Isa top = cpu_clones::best_isa_up_to(Isa::kAvx512);
  CHECK(cpu_clones::cpu_runs(top));
  if (cpu_clones::cpu_runs(Isa::kAvx512)) CHECK(top == Isa::kAvx512);
}

// Rill's exp for x <= 0 against exp in double, over a grid of [-87.33, 0]
// and its edges: the float result is within 2 ulp (the reduction's
// rounding, the polynomial's and the product's), which holds on any CPU as
// every step is one IEEE float operation, contraction off.
TEST_CASE("exp_nonpositive: within 2 ulp of exp over [ln FLT_MIN, 0]; 0 below, NaN through") {
  using exp_math::exp_nonpositive;
  double worst_ulp = 0;
  int points = 0;
  auto ulp_error = [](float got, double want) {
    const float w = static_cast<float>(want);
    // The float spacing on the side the error lies (half as wide below a power of 2).
    const double ulp = std::abs(static_cast<double>(std::nextafter(w, got >= want ? INFINITY : -INFINITY)) - w);
    return std::abs(got - want) / ulp;
  };
  for (double x = -87.3; x <= 0.0; x += 1.37e-4) {
    const float xf = static_cast<float>(x);
    worst_ulp = std::max(worst_ulp, ulp_error(exp_nonpositive(xf), std::exp(static_cast<double>(xf))));
    ++points;
  }
  for (float x : {0.0f, -0.0f, -1e-30f, -1e-7f, -0.34657359f, -0.6931472f, -1.0f, -20.5f, -87.0f, -87.33f}) {
    CAPTURE(x);
    worst_ulp = std::max(worst_ulp, ulp_error(exp_nonpositive(x), std::exp(static_cast<double>(x))));
  }
  MESSAGE("worst error ", worst_ulp, " ulp over ", points, " points");
  CHECK(worst_ulp <= 2.0);
  CHECK(exp_nonpositive(0.0f) == 1.0f);
  CHECK(exp_nonpositive(-88.0f) == 0.0f);
  CHECK(exp_nonpositive(-INFINITY) == 0.0f);
  CHECK(std::isnan(exp_nonpositive(NAN)));
}

TEST_CASE("softmax, cross-entropy and layer_norm give the same bits in every copy of their loops") {
  const Tensor x = Tensor::uniform({3, 2, 37, 37}, 41, -30, 30);
  const Tensor dy = Tensor::uniform(x.shape, 42);
  const Tensor logits = Tensor::uniform({45, 259}, 43, -40, 40);
  Tensor labels = Tensor::ints({45}, std::vector<int32_t>(45, 0));
  for (int i = 0; i < 45; ++i) labels.i32[static_cast<size_t>(i)] = (i * 37) % 259;
  const Tensor dloss = Tensor::uniform({45}, 44);
  const Tensor ln_x = Tensor::uniform({21, 67}, 45, -3, 3), ln_dy = Tensor::uniform(ln_x.shape, 46);
  const Tensor gamma = Tensor::uniform({67}, 47, 0.5f, 1.5f), beta = Tensor::uniform({67}, 48);
  auto outputs = [&] {
    std::vector<Tensor> all;
    for (int causal : {0, 1}) {
      const Attrs attrs{{"causal", int64_t{causal}}, {"scale", 0.3}};
      const Tensor y = run_ok("softmax", {x}, attrs)[0];
      all.push_back(y);
      all.push_back(run_ok("softmax_grad", {y, dy}, {{"scale", 0.3}})[0]);
    }
    all.push_back(run_ok("sparse_softmax_cross_entropy", {logits, labels})[0]);
    all.push_back(run_ok("sparse_softmax_cross_entropy_grad", {logits, labels, dloss})[0]);
    for (const Tensor& t : run_ok("layer_norm", {ln_x, gamma, beta})) all.push_back(t);
    const std::vector<Tensor> stats = run_ok("layer_norm", {ln_x, gamma, beta});
    for (const Tensor& t : run_ok("layer_norm_grad", {ln_dy, ln_x, stats[1], stats[2], gamma})) all.push_back(t);
    return all;
  };
  const std::vector<Tensor> baseline = [&] {
    const cpu_clones::ScopedIsaForTesting use(cpu_clones::Isa::kBaseline);
    return outputs();
  }();
  int copies = 0;
  for (const cpu_clones::Isa isa : cpu_clones::kIsas) {
    if (!cpu_clones::cpu_runs(isa)) continue;
    CAPTURE(std::string(cpu_clones::isa_name(isa)));
    const cpu_clones::ScopedIsaForTesting use(isa);
    const std::vector<Tensor> got = outputs();
    REQUIRE(got.size() == baseline.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(std::memcmp(got[i].f32.data(), baseline[i].f32.data(), got[i].f32.size() * sizeof(float)) == 0);
    }
    ++copies;
  }
  CHECK(copies >= 1);
}

TEST_CASE("softmax rows sum to one and survive large logits") {
  const Tensor x = Tensor::floats({2, 3}, {1, 2, 3, 1000, 1000, 1000});
  const Tensor y = run_ok("softmax", {x})[0];
  const double e = std::exp(1.0), z = e + e * e + e * e * e;
  CHECK(y.f32[0] == doctest::Approx(e / z));
  CHECK(y.f32[2] == doctest::Approx(e * e * e / z));
  for (int r = 0; r < 2; ++r) CHECK(y.f32[r * 3] + y.f32[r * 3 + 1] + y.f32[r * 3 + 2] == doctest::Approx(1.0));
  CHECK(y.f32[4] == doctest::Approx(1.0 / 3));
  CHECK(run_status("softmax", {Tensor::zeros({})}).code() == Code::kInvalidArgument);
}

TEST_CASE("sparse_softmax_cross_entropy is the stable negative log-likelihood") {
  const Tensor logits = Tensor::floats({2, 3}, {1, 2, 3, 500, 0, -500});
  const Tensor labels = Tensor::ints({2}, {2, 0});
  const Tensor loss = run_ok("sparse_softmax_cross_entropy", {logits, labels})[0];
  REQUIRE(loss.shape == Shape{2});
  CHECK(loss.f32[0] == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3));
  CHECK(loss.f32[1] == doctest::Approx(0.0));
}

TEST_CASE("a label outside [0, C) is an error naming the label and its position") {
  const Tensor logits = Tensor::zeros({3, 4});
  for (const char* type : {"sparse_softmax_cross_entropy", "accuracy"}) {
    Status s = run_status(type, {logits, Tensor::ints({3}, {0, 7, 1})});
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("label 7 at position 1") != std::string::npos);
    CHECK(run_status(type, {logits, Tensor::ints({3}, {0, 1, -1})}).message().find("label -1 at position 2") !=
          std::string::npos);
  }
  Status s = run_status("sparse_softmax_cross_entropy_grad",
                        {logits, Tensor::ints({3}, {4, 0, 0}), Tensor::zeros({3})});
  CHECK(s.message().find("label 4 at position 0") != std::string::npos);
  s = run_status("sparse_softmax_cross_entropy", {logits, Tensor::ints({2}, {0, 1})});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("[3, 4]") != std::string::npos);
  CHECK(s.message().find("[2]") != std::string::npos);
}

TEST_CASE("mse_loss sums or averages over the logical element count") {
  const Tensor p = Tensor::floats({2, 2}, {1, 2, 3, 4}), t = Tensor::floats({2, 2}, {0, 0, 3, 2});
  CHECK(run_ok("mse_loss", {p, t})[0].f32[0] == doctest::Approx(9.0));
  CHECK(run_ok("mse_loss", {p, t}, {{"reduction", std::string("mean")}})[0].f32[0] == doctest::Approx(2.25));
  RunOptions piece;
  piece.logical_inputs = {{6, 2}, {6, 2}};  // this is 2 of 6 rows
  const Tensor loss = run_ok("mse_loss", {p, t}, {{"reduction", std::string("mean")}}, piece)[0];
  CHECK(loss.shape == Shape{});
  CHECK(loss.f32[0] == doctest::Approx(9.0 / 12));
  Status s = run_status("mse_loss", {p, t}, {{"reduction", std::string("avg")}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("avg") != std::string::npos);
  CHECK(run_status("mse_loss", {p, t}, {{"reduction", int64_t{1}}}).code() == Code::kInvalidArgument);
  s = run_status("mse_loss", {p, Tensor::zeros({4})});
  CHECK(s.message().find("pred [2, 2] and target [4]") != std::string::npos);
}

TEST_CASE("reduce_sum and reduce_mean over axes, keepdims, and logical counts") {
  const Tensor x = Tensor::floats({2, 3}, {1, 2, 3, 4, 5, 6});
  check_values(run_ok("reduce_sum", {x})[0], {}, {21});
  check_values(run_ok("reduce_sum", {x}, {{"axes", std::vector<int64_t>{0}}})[0], {3}, {5, 7, 9});
  check_values(run_ok("reduce_sum", {x}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}})[0], {2, 1},
               {6, 15});
  check_values(run_ok("reduce_mean", {x}, {{"axes", std::vector<int64_t>{1}}})[0], {2}, {2, 5});
  const Tensor x3 = Tensor::uniform({2, 3, 4}, 5);
  const Tensor s02 = run_ok("reduce_sum", {x3}, {{"axes", std::vector<int64_t>{0, 2}}})[0];
  REQUIRE(s02.shape == Shape{3});
  for (int j = 0; j < 3; ++j) {
    double want = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) want += x3.f32[(i * 3 + j) * 4 + k];
    CHECK(s02.f32[j] == doctest::Approx(want).epsilon(1e-5));
  }
  RunOptions piece;
  piece.logical_inputs = {{4, 3}};  // two of four rows on this device
  check_values(run_ok("reduce_mean", {x}, {{"axes", std::vector<int64_t>{0}}}, piece)[0], {3},
               {5.0f / 4, 7.0f / 4, 9.0f / 4});
  check_values(run_ok("reduce_mean", {x}, {}, piece)[0], {}, {21.0f / 12});
  Status s = run_status("reduce_sum", {x}, {{"axes", std::vector<int64_t>{2}}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("axis 2") != std::string::npos);
  CHECK(run_status("reduce_sum", {x}, {{"axes", std::vector<int64_t>{1, 1}}}).code() == Code::kInvalidArgument);
  CHECK(run_status("reduce_sum", {x}, {{"axes", 0.5}}).code() == Code::kInvalidArgument);
}

TEST_CASE("broadcast_like spreads dy back and scales by the logical count for means") {
  const Tensor x = Tensor::zeros({2, 3});
  const Attrs rows{{"axes", std::vector<int64_t>{0}}};
  check_values(run_ok("broadcast_like", {Tensor::floats({3}, {1, 2, 3}), x}, rows)[0], {2, 3}, {1, 2, 3, 1, 2, 3});
  Attrs mean = rows;
  mean.set("mean", int64_t{1});
  RunOptions piece;
  piece.logical_inputs = {{3}, {8, 3}};
  check_values(run_ok("broadcast_like", {Tensor::floats({3}, {8, 16, 24}), x}, mean, piece)[0], {2, 3},
               {1, 2, 3, 1, 2, 3});
  Status s = run_status("broadcast_like", {Tensor::zeros({2}), x}, rows);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("dy [2] does not match x [2, 3]") != std::string::npos);
}

TEST_CASE("accuracy divides the matches by the logical batch") {
  const Tensor logits = Tensor::floats({4, 3}, {0, 1, 0, 5, 1, 1, 0, 0, 9, 2, 2, 1});
  const Tensor labels = Tensor::ints({4}, {1, 0, 2, 1});  // last row ties 0 and 1: argmax is 0
  CHECK(run_ok("accuracy", {logits, labels})[0].f32[0] == doctest::Approx(0.75));
  RunOptions piece;
  piece.logical_inputs = {{10, 3}, {10}};
  const Tensor acc = run_ok("accuracy", {logits, labels}, {}, piece)[0];
  CHECK(acc.shape == Shape{});
  CHECK(acc.f32[0] == doctest::Approx(0.3));
}

TEST_CASE("ones_like and scale") {
  check_values(run_ok("ones_like", {Tensor::zeros({})})[0], {}, {1});
  const Tensor ints = run_ok("ones_like", {Tensor::ints({2}, {5, 6})})[0];
  CHECK(ints.i32 == std::vector<int32_t>{1, 1});
  check_values(run_ok("scale", {Tensor::floats({3}, {1, -2, 3})}, {{"scale", -0.5}})[0], {3}, {-0.5f, 1, -1.5f});
  check_values(run_ok("scale", {Tensor::floats({1}, {3})}, {{"scale", int64_t{2}}})[0], {1}, {6});
  CHECK(run_status("scale", {Tensor::zeros({1})}, {{"scale", std::string("x")}}).code() == Code::kInvalidArgument);
}

TEST_CASE("every registered op is complete and its signatures have the op's arity") {
  std::set<std::string> types;
  for (const OpDef* def : all_ops()) {
    INFO("op ", def->type);
    CHECK(types.insert(def->type).second);
    CHECK(find_op(def->type) == def);
    CHECK((def->infer != nullptr));
    CHECK((def->sbp != nullptr));
    CHECK((def->cpu != nullptr));
    // Every op but the initializers (which run on the host, so that a
    // variable starts bitwise alike on every device type) names its CUDA
    // kernel; where this build made the CUDA module, the module has it
    // (the loader refuses a module lacking one).
    if (def->role == OpRole::kInitializer) {
      CHECK((def->cuda == nullptr));
      continue;
    }
    CHECK((def->cuda != nullptr));
#if RILL_WITH_CUDA
    CHECK((find_cuda_kernel(def->type) != nullptr));
#endif
  }
  // Arity of each signature, on inputs each op accepts.
  struct Sample {
    const char* type;
    std::vector<TensorMeta> inputs;
    Attrs attrs;
  };
  const TensorMeta m23{{2, 3}, DType::kF32}, m32{{3, 2}, DType::kF32}, v3{{3}, DType::kF32};
  const TensorMeta v2{{2}, DType::kF32}, l2{{2}, DType::kI32}, scalar{{}, DType::kF32};
  const std::vector<Sample> samples = {
      {"matmul", {m23, m32}, {}}, {"add", {m23, m23}, {}}, {"add", {m23, scalar}, {}}, {"sub", {m23, m23}, {}},
      {"mul", {m23, scalar}, {}}, {"bias_add", {m23, v3}, {}}, {"scale", {m23}, {}}, {"ones_like", {m23}, {}},
      {"relu", {m23}, {}}, {"gelu", {m23}, {}}, {"tanh", {m23}, {}}, {"sigmoid", {m23}, {}}, {"softmax", {m23}, {}},
      {"relu_grad", {m23, m23}, {}}, {"gelu_grad", {m23, m23}, {}}, {"tanh_grad", {m23, m23}, {}},
      {"sigmoid_grad", {m23, m23}, {}}, {"softmax_grad", {m23, m23}, {}},
      {"sparse_softmax_cross_entropy", {m23, l2}, {}}, {"sparse_softmax_cross_entropy_grad", {m23, l2, v2}, {}},
      {"mse_loss", {m23, m23}, {}}, {"mse_loss_grad", {m23, m23, scalar}, {}}, {"accuracy", {m23, l2}, {}},
      {"reduce_sum", {m23}, {{"axes", std::vector<int64_t>{1}}}}, {"reduce_mean", {m23}, {}},
      {"broadcast_like", {v2, m23}, {{"axes", std::vector<int64_t>{1}}}},
  };
  // Ops without a sample here are tried on [2, 3] f32 inputs; those that
  // reject them are covered by their own tests.
  for (const OpDef* def : all_ops()) {
    bool sampled = false;
    for (const Sample& sample : samples) sampled = sampled || def->type == std::string(sample.type);
    if (sampled || def->num_inputs < 1) continue;
    std::vector<TensorMeta> inputs(def->num_inputs, m23), outputs;
    if (!infer_op(*def, {}, inputs, &outputs).ok()) continue;
    INFO("op ", def->type);
    for (const SbpSignature& sig : def->sbp({}, inputs)) {
      CHECK(sig.inputs.size() == inputs.size());
      CHECK(sig.outputs.size() == outputs.size());
    }
  }
  for (const Sample& sample : samples) {
    INFO("op ", sample.type);
    const OpDef* def = find_op(sample.type);
    REQUIRE(def != nullptr);
    std::vector<TensorMeta> outputs;
    REQUIRE(infer_op(*def, sample.attrs, sample.inputs, &outputs).ok());
    const auto signatures = def->sbp(sample.attrs, sample.inputs);
    CHECK(!signatures.empty());
    for (const SbpSignature& sig : signatures) {
      CHECK(sig.inputs.size() == sample.inputs.size());
      CHECK(sig.outputs.size() == outputs.size());
    }
  }
}

}  // namespace
}  // namespace rill::testing
