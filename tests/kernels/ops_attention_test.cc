// The fused attention op (kernels/ops/attention.cc): values and the saved
// log-sum-exp against a double-precision loop, gradients against finite
// differences, every SBP signature against the single-device result on 2
// and 3 pieces, with and without the causal mask, and bad shapes refused.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/ops/ops.h"
#include "tests/kernels/grad_check.h"
#include "tests/kernels/run_ok.h"
#include "tests/kernels/sbp_check.h"

namespace rill::testing {
namespace {

// softmax(scale q k^T) v per leading index, in double, and each row's
// log-sum-exp.
void reference(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, std::vector<double>* y,
               std::vector<double>* lse) {
  const size_t r = q.shape.size();
  const int64_t t = q.shape[r - 2], d = q.shape[r - 1], s = k.shape[r - 2], heads = q.size() / (t * d);
  y->assign(static_cast<size_t>(q.size()), 0.0);
  lse->assign(static_cast<size_t>(heads * t), 0.0);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < t; ++i) {
      const int64_t keys = causal ? i + 1 : s;
      std::vector<double> sc(static_cast<size_t>(keys));
      double top = -INFINITY, sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += double(q.f32[(h * t + i) * d + c]) * k.f32[(h * s + j) * d + c];
        sc[j] = scale * dot;
        top = std::max(top, sc[j]);
      }
      for (int64_t j = 0; j < keys; ++j) sum += sc[j] = std::exp(sc[j] - top);
      for (int64_t j = 0; j < keys; ++j)
        for (int64_t c = 0; c < d; ++c) (*y)[(h * t + i) * d + c] += sc[j] / sum * v.f32[(h * s + j) * d + c];
      (*lse)[h * t + i] = top + std::log(sum);
    }
}

// Scores of magnitude < 2 over at most 9 keys of a head of 4: each output
// is a convex mix of values in [-1, 1) and the f32 exp and sums carry a
// relative error of a few units of 6e-8 per term: 1e-5 holds on any CPU.
TEST_CASE("attention: softmax(scale q k^T) v by rows, its log-sum-exp, causal or not, any scale") {
  const Tensor q = Tensor::uniform({2, 3, 7, 4}, 1), k = Tensor::uniform({2, 3, 9, 4}, 2), v = Tensor::uniform({2, 3, 9, 4}, 3);
  const Tensor kc = Tensor::uniform({2, 3, 7, 4}, 4), vc = Tensor::uniform({2, 3, 7, 4}, 5);
  struct Case {
    const Tensor *k, *v;
    Attrs attrs;
    double scale;
    bool causal;
  };
  for (const Case& c : {Case{&k, &v, {}, 0.5, false}, Case{&k, &v, {{"scale", 0.9}}, 0.9, false},
                        Case{&kc, &vc, {{"causal", int64_t{1}}}, 0.5, true},
                        Case{&kc, &vc, {{"causal", int64_t{1}}, {"scale", 1.3}}, 1.3, true}}) {
    CAPTURE(c.scale);
    CAPTURE(c.causal);
    const std::vector<Tensor> out = run_ok("attention", {q, *c.k, *c.v}, c.attrs);
    REQUIRE(out[0].shape == q.shape);
    REQUIRE(out[1].shape == Shape{2, 3, 7});
    std::vector<double> y, lse;
    reference(q, *c.k, *c.v, c.scale, c.causal, &y, &lse);
    for (size_t i = 0; i < y.size(); ++i) CHECK(out[0].f32[i] == doctest::Approx(y[i]).epsilon(1e-5).scale(1));
    for (size_t i = 0; i < lse.size(); ++i) CHECK(out[1].f32[i] == doctest::Approx(lse[i]).epsilon(1e-5));
  }
}

// Central differences of f32 values over a smooth function whose
// derivatives are O(1): the default tolerances hold on any CPU, as for the
// other ops' checks (why: tests/kernels/grad_check.h; a probe of k
// moves 20 outputs here, the most of any op test).
TEST_CASE("attention: gradients of q, k and v by finite differences; every SBP signature on 2 and 3 pieces") {
  const Tensor q = Tensor::uniform({2, 3, 5, 4}, 6), k = Tensor::uniform({2, 3, 6, 4}, 7), v = Tensor::uniform({2, 3, 6, 4}, 8);
  const Tensor kc = Tensor::uniform({2, 3, 5, 4}, 9), vc = Tensor::uniform({2, 3, 5, 4}, 10);
  GradCheckOptions y_only;  // lse is saved for the gradient, not differentiated
  y_only.differentiable_outputs = 1;
  EXPECT_OK(check_gradients("attention", {q, k, v}, {}, {0, 1, 2}, y_only));
  EXPECT_OK(check_gradients("attention", {q, kc, vc}, {{"causal", int64_t{1}}, {"scale", 0.7}}, {0, 1, 2}, y_only));
  for (const Attrs& attrs : {Attrs{}, Attrs{{"causal", int64_t{1}}}}) {
    const bool causal = attrs.has("causal");
    const Tensor& kk = causal ? kc : k;
    const Tensor& vv = causal ? vc : v;
    EXPECT_OK(check_sbp_signatures("attention", {q, kk, vv}, attrs, 2));
    EXPECT_OK(check_sbp_signatures("attention", {q, kk, vv}, attrs, 3));
    const std::vector<Tensor> out = run_ok("attention", {q, kk, vv}, attrs);
    const std::vector<Tensor> grad_in = {q, kk, vv, out[0], out[1], Tensor::uniform(q.shape, 11)};
    EXPECT_OK(check_sbp_signatures("attention_grad", grad_in, attrs, 2));
    EXPECT_OK(check_sbp_signatures("attention_grad", grad_in, attrs, 3));
  }
  // The leading axes split, and the queries' rows with the keys and values
  // whole (context parallelism); the head never.
  for (const SbpSignature& sig : find_op("attention")->sbp({}, std::vector<TensorMeta>{q.meta(), k.meta(), v.meta()})) {
    CHECK((sig.inputs[0] == Sbp::broadcast() || sig.inputs[0] == Sbp::split(0) || sig.inputs[0] == Sbp::split(1) ||
           sig.inputs[0] == Sbp::split(2)));
    if (sig.inputs[0] == Sbp::split(2)) CHECK((sig.inputs[1] == Sbp::broadcast() && sig.inputs[2] == Sbp::broadcast()));
  }
}

TEST_CASE("attention: shapes that do not fit are refused, naming them") {
  const Tensor q = Tensor::uniform({2, 5, 4}, 12), k = Tensor::uniform({2, 6, 4}, 13);
  Status s = run_op("attention", {k, q, q}, {{"causal", int64_t{1}}}).status();
  CHECK(s.message().find("causal: q [2, 6, 4] and k [2, 5, 4] must have at least as many keys as queries") !=
        std::string::npos);
  s = run_op("attention", {q, Tensor::uniform({2, 6, 3}, 14), Tensor::uniform({2, 6, 3}, 15)}).status();
  CHECK(s.message().find("must be [..., S, D] with q [2, 5, 4]'s leading axes and D") != std::string::npos);
  s = run_op("attention", {q, Tensor::uniform({3, 6, 4}, 16), Tensor::uniform({3, 6, 4}, 17)}).status();
  CHECK(s.message().find("leading axes") != std::string::npos);
  s = run_op("attention", {q, k, k}, {{"scale", -1.0}}).status();
  CHECK(s.message().find("attr 'scale' is -1; it must be > 0") != std::string::npos);
}

}  // namespace
}  // namespace rill::testing
