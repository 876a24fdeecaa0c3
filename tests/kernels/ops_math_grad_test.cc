// Gradient rules of the math ops against finite differences, and their SBP
// signatures against simulated multi-device runs.
#include <doctest/doctest.h>

#include "tests/kernels/grad_check.h"
#include "tests/kernels/sbp_check.h"

namespace rill::testing {
namespace {

Attrs transposes(int a, int b) { return {{"transpose_a", int64_t{a}}, {"transpose_b", int64_t{b}}}; }
Attrs axes(std::vector<int64_t> list, int keepdims = 0) {
  return {{"axes", std::move(list)}, {"keepdims", int64_t{keepdims}}};
}

// Values in [0.2, 1.2) with random signs: clear of relu's kink at 0.
Tensor away_from_zero(Shape shape, uint64_t seed) {
  Tensor t = Tensor::uniform(std::move(shape), seed, 0.2f, 1.2f);
  for (size_t i = 0; i < t.f32.size(); i += 2) t.f32[i] = -t.f32[i];
  return t;
}

TEST_CASE("matmul gradients for every transpose combination") {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      INFO("transpose_a=", ta, " transpose_b=", tb);
      const Tensor a = Tensor::uniform(ta ? Shape{4, 3} : Shape{3, 4}, 1);
      const Tensor b = Tensor::uniform(tb ? Shape{5, 4} : Shape{4, 5}, 2);
      EXPECT_OK(check_gradients("matmul", {a, b}, transposes(ta, tb), {0, 1}));
      EXPECT_OK(check_sbp_signatures("matmul", {a, b}, transposes(ta, tb)));
      EXPECT_OK(check_sbp_signatures("matmul", {a, b}, transposes(ta, tb), 3));
    }
}

TEST_CASE("the grad rule only builds what is asked for") {
  const Tensor a = Tensor::uniform({2, 3}, 1), b = Tensor::uniform({3, 2}, 2);
  auto y = run_op("matmul", {a, b});
  REQUIRE(y.ok());
  EagerGradBuilder builder("matmul", {}, {a, b}, *y, {Tensor::uniform({2, 2}, 3)}, {true, false});
  REQUIRE(find_op("matmul")->grad(builder).ok());
  REQUIRE(builder.status().ok());
  CHECK(builder.input_grad(0) != nullptr);
  CHECK(builder.input_grad(1) == nullptr);
  CHECK(builder.added_ops() == std::vector<std::string>{"matmul"});
  EagerGradBuilder no_grad("matmul", {}, {a, b}, *y, {std::nullopt}, {true, true});
  REQUIRE(find_op("matmul")->grad(no_grad).ok());
  CHECK(no_grad.added_ops().empty());
}

TEST_CASE("grad check reports a wrong gradient with op, input and element") {
  // A step far too coarse for tanh's curvature makes the finite differences
  // disagree with the exact gradient: the check must say where.
  GradCheckOptions coarse;
  coarse.eps = 0.5;
  coarse.tolerance = 1e-4;
  Status s = check_gradients("tanh", {Tensor::floats({3}, {0.1f, 0.9f, 2.0f})}, {}, {0}, coarse);
  CHECK(s.code() == Code::kInternal);
  CHECK(s.message().find("op 'tanh' input 0 element") != std::string::npos);
  CHECK(check_gradients("accuracy", {Tensor::zeros({2, 2}), Tensor::ints({2}, {0, 1})}, {}, {0}).code() ==
        Code::kInvalidArgument);
}

TEST_CASE("elementwise binary gradients, same shape and scalar second input") {
  const Tensor x = Tensor::uniform({3, 4}, 1), y = Tensor::uniform({3, 4}, 2);
  for (const char* type : {"add", "sub", "mul"}) {
    INFO(type);
    EXPECT_OK(check_gradients(type, {x, y}, {}, {0, 1}));
    EXPECT_OK(check_gradients(type, {x, Tensor::floats({}, {0.7f})}, {}, {0, 1}));
    EXPECT_OK(check_gradients(type, {x, Tensor::floats({1}, {-0.3f})}, {}, {0, 1}));
    EXPECT_OK(check_gradients(type, {Tensor::uniform({5}, 3), Tensor::floats({1}, {0.4f})}, {}, {0, 1}));
    EXPECT_OK(check_sbp_signatures(type, {x, y}));
    EXPECT_OK(check_sbp_signatures(type, {x, Tensor::floats({}, {0.7f})}));
  }
}

TEST_CASE("bias_add gradients and signatures") {
  const Tensor x = Tensor::uniform({4, 3}, 1), b = Tensor::uniform({3}, 2);
  EXPECT_OK(check_gradients("bias_add", {x, b}, {}, {0, 1}));
  EXPECT_OK(check_sbp_signatures("bias_add", {x, b}));
  const Tensor x3 = Tensor::uniform({2, 3, 4}, 3), b0 = Tensor::uniform({2}, 4);
  EXPECT_OK(check_gradients("bias_add", {x3, b0}, {{"axis", int64_t{0}}}, {0, 1}));
  EXPECT_OK(check_sbp_signatures("bias_add", {x3, b0}, {{"axis", int64_t{0}}}));
  EXPECT_OK(check_sbp_signatures("bias_add", {x3, Tensor::uniform({3}, 5)}, {{"axis", int64_t{1}}}, 3));
}

TEST_CASE("activation gradients and signatures") {
  const Tensor x = away_from_zero({3, 5}, 1), dy = Tensor::uniform({3, 5}, 2);
  for (const char* type : {"relu", "gelu", "tanh", "sigmoid", "softmax"}) {
    INFO(type);
    EXPECT_OK(check_gradients(type, {x}, {}, {0}));
    EXPECT_OK(check_sbp_signatures(type, {x}));
  }
  for (const char* type : {"relu_grad", "gelu_grad", "tanh_grad", "sigmoid_grad", "softmax_grad"}) {
    INFO(type);
    EXPECT_OK(check_sbp_signatures(type, {x, dy}));
  }
  EXPECT_OK(check_gradients("softmax", {Tensor::uniform({2, 3, 4}, 3, -3, 3)}, {}, {0}));
}

TEST_CASE("cross entropy gradient flows to logits only") {
  const Tensor logits = Tensor::uniform({4, 5}, 1, -2, 2);
  const Tensor labels = Tensor::ints({4}, {0, 4, 2, 2});
  EXPECT_OK(check_gradients("sparse_softmax_cross_entropy", {logits, labels}, {}, {0}));
  EXPECT_OK(check_sbp_signatures("sparse_softmax_cross_entropy", {logits, labels}));
  EXPECT_OK(check_sbp_signatures("sparse_softmax_cross_entropy_grad", {logits, labels, Tensor::uniform({4}, 2)}));
  auto loss = run_op("sparse_softmax_cross_entropy", {logits, labels});
  REQUIRE(loss.ok());
  EagerGradBuilder builder("sparse_softmax_cross_entropy", {}, {logits, labels}, *loss,
                           {Tensor::uniform({4}, 3)}, {true, false});
  REQUIRE(find_op("sparse_softmax_cross_entropy")->grad(builder).ok());
  CHECK(builder.input_grad(1) == nullptr);
}

TEST_CASE("mse_loss gradients for both inputs and both reductions") {
  const Tensor p = Tensor::uniform({3, 4}, 1), t = Tensor::uniform({3, 4}, 2);
  for (const char* reduction : {"sum", "mean"}) {
    INFO(reduction);
    const Attrs attrs{{"reduction", std::string(reduction)}};
    EXPECT_OK(check_gradients("mse_loss", {p, t}, attrs, {0, 1}));
    EXPECT_OK(check_sbp_signatures("mse_loss", {p, t}, attrs));
    EXPECT_OK(check_sbp_signatures("mse_loss", {p, t}, attrs, 3));
    EXPECT_OK(check_sbp_signatures("mse_loss_grad", {p, t, Tensor::floats({}, {0.8f})}, attrs));
  }
}

TEST_CASE("reduction gradients over every axis pattern") {
  const Tensor x = Tensor::uniform({2, 3, 4}, 1);
  const std::vector<Attrs> cases = {axes({}), axes({0}), axes({1}), axes({2}), axes({0, 2}), axes({1, 2}, 1),
                                    axes({-1}, 1), axes({0, 1, 2}, 1)};
  for (const char* type : {"reduce_sum", "reduce_mean"})
    for (const Attrs& attrs : cases) {
      INFO(type, " axes ", fmt::format("{}", fmt::join(attrs.get_ints("axes"), ",")), " keepdims ",
           attrs.get_int("keepdims"));
      EXPECT_OK(check_gradients(type, {x}, attrs, {0}));
      EXPECT_OK(check_sbp_signatures(type, {x}, attrs));
      EXPECT_OK(check_sbp_signatures(type, {Tensor::uniform({5, 3, 4}, 2)}, attrs, 3));
    }
  EXPECT_OK(check_gradients("reduce_mean", {Tensor::floats({}, {2})}, {}, {0}));
}

TEST_CASE("broadcast_like signatures, with and without the mean scale") {
  const Tensor x = Tensor::uniform({5, 3, 4}, 1);
  for (int mean = 0; mean < 2; ++mean) {
    Attrs attrs = axes({0, 2});
    attrs.set("mean", int64_t{mean});
    EXPECT_OK(check_sbp_signatures("broadcast_like", {Tensor::uniform({3}, 2), x}, attrs));
    EXPECT_OK(check_sbp_signatures("broadcast_like", {Tensor::uniform({3}, 2), x}, attrs, 3));
    Attrs kept = axes({1}, 1);
    kept.set("mean", int64_t{mean});
    EXPECT_OK(check_sbp_signatures("broadcast_like", {Tensor::uniform({5, 1, 4}, 3), x}, kept));
  }
}

TEST_CASE("scale, ones_like and accuracy signatures; scale gradient") {
  const Tensor x = Tensor::uniform({4, 3}, 1);
  EXPECT_OK(check_gradients("scale", {x}, {{"scale", -1.5}}, {0}));
  EXPECT_OK(check_sbp_signatures("scale", {x}, {{"scale", -1.5}}));
  EXPECT_OK(check_sbp_signatures("ones_like", {x}));
  EXPECT_OK(check_sbp_signatures("ones_like", {Tensor::floats({}, {2.5f})}));
  const Tensor logits = Tensor::uniform({5, 3}, 2);
  EXPECT_OK(check_sbp_signatures("accuracy", {logits, Tensor::ints({5}, {0, 1, 2, 1, 0})}));
  // accumulate: linear like scale; micro-batch 0 writes x / K (later ones add,
  // tested through actors in tests/runtime).
  const Attrs four{{"micro_batches", int64_t{4}}};
  EXPECT_OK(check_sbp_signatures("accumulate", {x}, four));
  auto y = run_op("accumulate", {x}, four);
  REQUIRE(y.ok());
  for (size_t i = 0; i < x.f32.size(); ++i) CHECK((*y)[0].f32[i] == x.f32[i] * 0.25f);
  CHECK_FALSE(run_op("accumulate", {x}, {{"micro_batches", int64_t{0}}}).ok());
}

}  // namespace
}  // namespace rill::testing
