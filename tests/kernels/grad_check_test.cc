// The gradient check itself (tests/kernels/grad_check.h): at its default
// settings it tells a correct rule from one that is wrong by a realistic
// amount (5% off, n - 1 for n, a missing term) in gradients of the size
// real layers have (a few hundredths), where the former default's absolute
// bound of 0.01 let the first two pass.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/kernels/grad_check.h"
#include "tests/kernels/sbp_check.h"  // EXPECT_OK

namespace rill::testing {
namespace {

// Hands everything to the rule's real builder; `set_grad` decides what an
// input's gradient becomes.
class WrongGrads : public GradBuilder {
 public:
  explicit WrongGrads(GradBuilder& real) : real_(real) {}
  const Attrs& attrs() const override { return real_.attrs(); }
  int num_inputs() const override { return real_.num_inputs(); }
  const std::string& input(int i) const override { return real_.input(i); }
  const std::string& output(int i) const override { return real_.output(i); }
  const TensorMeta& meta(const std::string& tensor) const override { return real_.meta(tensor); }
  std::string output_grad(int i) const override { return real_.output_grad(i); }
  bool needs_input_grad(int i) const override { return real_.needs_input_grad(i); }
  std::vector<std::string> add_op(const std::string& type, std::vector<std::string> inputs, Attrs attrs = {},
                                  int num_outputs = 1) override {
    return real_.add_op(type, std::move(inputs), std::move(attrs), num_outputs);
  }
  void set_input_grad(int i, const std::string& grad) override { real_.set_input_grad(i, wrong(i, grad)); }

 protected:
  // The wrong gradient made from the right one.
  virtual std::string wrong(int i, const std::string& right) = 0;
  std::string op(const std::string& type, std::vector<std::string> inputs, Attrs attrs = {}) {
    return real_.add_op(type, std::move(inputs), std::move(attrs))[0];
  }

 private:
  GradBuilder& real_;
};

// Each input's gradient times `factor`.
class Scaled : public WrongGrads {
 public:
  Scaled(GradBuilder& real, double factor) : WrongGrads(real), factor_(factor) {}

 private:
  std::string wrong(int, const std::string& right) override { return op("scale", {right}, {{"scale", factor_}}); }
  double factor_;
};

// softmax's rule, 5% too large.
Status softmax_5_percent_off(GradBuilder& g) {
  Scaled wrong(g, 1.05);
  return find_op("softmax")->grad(wrong);
}

// reduce_mean's rule over 12 elements dividing by 11, not 12 (the
// unbiased variance's n - 1 where the mean's n belongs): 9% too large.
Status mean_of_12_over_11(GradBuilder& g) {
  Scaled wrong(g, 12.0 / 11.0);
  return find_op("reduce_mean")->grad(wrong);
}

// gelu_tanh's rule without the derivative of the cubic inside its tanh:
// d/dx tanh(c (x + a x^3)) taken as c (1 - t^2), not c (1 + 3 a x^2) (1 - t^2).
// It lacks dy * 1.5 a c x^3 (1 - t^2), at most 0.03 |dy| for |x| < 1.
class MissingCubic : public WrongGrads {
 public:
  using WrongGrads::WrongGrads;

 private:
  std::string wrong(int, const std::string& right) override {
    constexpr double a = 0.044715, c = 0.7978845608028654;  // sqrt(2 / pi)
    const std::string x = input(0), dy = output_grad(0);
    const std::string x3 = op("mul", {op("mul", {x, x}), x});
    const std::string inner = op("add", {x, op("scale", {x3}, {{"scale", a}})});
    const std::string t = op("tanh", {op("scale", {inner}, {{"scale", c}})});
    const std::string one_minus_t2 = op("sub", {op("ones_like", {t}), op("mul", {t, t})});
    const std::string term = op("scale", {op("mul", {op("mul", {x3, one_minus_t2}), dy})}, {{"scale", 1.5 * a * c}});
    return op("sub", {right, term});
  }
};

Status gelu_tanh_missing_cubic(GradBuilder& g) {
  MissingCubic wrong(g);
  return find_op("gelu_tanh")->grad(wrong);
}

// The largest |gradient| the right rule gives input 0: the size the check
// has to see an error in.
float largest_gradient(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  auto out = run_op(type, inputs, attrs);
  REQUIRE(out.ok());
  EagerGradBuilder builder(type, attrs, inputs, *out, {Tensor::uniform((*out)[0].shape, 7)}, {true});
  REQUIRE(find_op(type)->grad(builder).ok());
  REQUIRE(builder.input_grad(0) != nullptr);
  float largest = 0;
  for (float v : builder.input_grad(0)->f32) largest = std::fmax(largest, std::fabs(v));
  return largest;
}

struct Case {
  const char* type;
  GradFn wrong;
  Tensor x;
  Attrs attrs;
  float largest;        // bound on the right gradient's elements: of realistic size
  bool former_missed;   // the former defaults let it pass
};

TEST_CASE("the check at its defaults catches wrong gradient rules of realistic size, and passes the right ones") {
  const Case cases[] = {
      {"softmax", softmax_5_percent_off, Tensor::uniform({4, 16}, 21, -2, 2), {}, 0.2f, true},
      {"reduce_mean", mean_of_12_over_11, Tensor::uniform({3, 4}, 22), {}, 0.1f, true},
      {"gelu_tanh", gelu_tanh_missing_cubic, Tensor::uniform({3, 5}, 23), {}, 1.0f, false},
  };
  for (const Case& c : cases) {
    const std::string type = c.type;
    CAPTURE(type);
    CHECK(largest_gradient(c.type, {c.x}, c.attrs) < c.largest);
    EXPECT_OK(check_gradients(c.type, {c.x}, c.attrs, {0}));
    const Status wrong = check_gradient_rule(c.type, c.wrong, {c.x}, c.attrs, {0});
    CHECK(wrong.code() == Code::kInternal);
    CHECK(wrong.message().find(std::string("op '") + c.type + "' input 0 element") != std::string::npos);
    if (!c.former_missed) continue;
    // The former defaults (step 1e-3, |error| <= 0.01 * max(1, |numeric|))
    // did not see it: the error is that small. A flat 0.01 is never looser
    // than that bound, so what passes it passed the former check.
    GradCheckOptions former;
    former.eps = 1e-3;
    former.abs_tolerance = 1e-2;
    former.tolerance = 0;
    EXPECT_OK(check_gradient_rule(c.type, c.wrong, {c.x}, c.attrs, {0}, former));
  }
}

}  // namespace
}  // namespace rill::testing
