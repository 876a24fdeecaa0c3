// Ring attention's pieces (kernels/ops/attention.cc, attention_merge.cc):
// attention of one piece of the queries over one piece of the keys, each
// at its place in the whole sequence (input_offsets), joined over every
// piece of the keys by attention_merge, gives that piece's rows of the
// whole attention; attention_grad over each piece of the keys, with the
// merged y and lse, sums to the whole gradient. Causal or not, in any order
// of the keys' pieces (a ring's step r reads the piece r places back).
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/ops/ops.h"
#include "tests/kernels/run_ok.h"
#include "tests/kernels/sbp_check.h"

namespace rill::testing {
namespace {

constexpr int kAxis = 2;  // [batch, heads, T, D]

RunOptions placed(const Tensor& q, int64_t q_at, const Tensor& k, int64_t k_at, const Shape& whole_q,
                  const Shape& whole_k, size_t more = 0) {
  RunOptions o;
  o.logical_inputs = {whole_q, whole_k, whole_k};
  Shape qo(q.shape.size(), 0), ko(k.shape.size(), 0);
  qo[kAxis] = q_at;
  ko[kAxis] = k_at;
  o.input_offsets = {qo, ko, ko};
  for (size_t i = 0; i < more; ++i) {  // y, lse, dy: the queries' piece
    o.logical_inputs.push_back(i == 1 ? Shape(whole_q.begin(), whole_q.end() - 1) : whole_q);
    o.input_offsets.push_back(i == 1 ? Shape(qo.begin(), qo.end() - 1) : qo);
  }
  return o;
}

// Values of magnitude < 1 over 12 keys of a head of 4: every output is a
// convex mix or a sum of at most 12 terms of magnitude < 2, each f32
// operation off by a few units of 6e-8 relative, in whatever order the
// pieces come: 1e-5 holds on any CPU, and a key seen twice or missed moves
// an output by a whole term (about 1e-1).
TEST_CASE("attention over pieces of the keys at their places, merged, is the whole attention; its gradients sum") {
  const Shape shape = {1, 2, 12, 4};
  const Tensor q = Tensor::uniform(shape, 21), k = Tensor::uniform(shape, 22), v = Tensor::uniform(shape, 23);
  const Tensor dy = Tensor::uniform(shape, 24);
  for (int64_t causal : {0, 1}) {
    CAPTURE(causal);
    const Attrs attrs{{"causal", causal}};
    const std::vector<Tensor> whole = run_ok("attention", {q, k, v}, attrs);
    const std::vector<Tensor> whole_grad = run_ok("attention_grad", {q, k, v, whole[0], whole[1], dy}, attrs);
    constexpr int kPieces = 3;
    std::vector<Tensor> dk(kPieces, Tensor::zeros({1, 2, 4, 4})), dv = dk;
    for (int i = 0; i < kPieces; ++i) {
      const Tensor qi = split_piece(q, kAxis, kPieces, i);
      Tensor y, lse;
      for (int r = 0; r < kPieces; ++r) {  // ring order: piece i, i - 1, ...
        const int j = (i - r + kPieces) % kPieces;
        const std::vector<Tensor> part =
            run_ok("attention", {qi, split_piece(k, kAxis, kPieces, j), split_piece(v, kAxis, kPieces, j)}, attrs,
                   placed(qi, 4 * i, qi, 4 * j, shape, shape));
        if (causal != 0 && j > i)  // wholly in the queries' future
          for (float l : part[1].f32) CHECK(l == -INFINITY);
        if (r == 0) {
          y = part[0];
          lse = part[1];
          continue;
        }
        const std::vector<Tensor> merged = run_ok("attention_merge", {y, lse, part[0], part[1]});
        y = merged[0];
        lse = merged[1];
      }
      const Tensor want_y = split_piece(whole[0], kAxis, kPieces, i), want_lse = split_piece(whole[1], kAxis, kPieces, i);
      for (size_t e = 0; e < y.f32.size(); ++e) CHECK(y.f32[e] == doctest::Approx(want_y.f32[e]).epsilon(1e-5).scale(1));
      for (size_t e = 0; e < lse.f32.size(); ++e) CHECK(lse.f32[e] == doctest::Approx(want_lse.f32[e]).epsilon(1e-5));
      Tensor dq = Tensor::zeros(qi.shape);
      for (int j = 0; j < kPieces; ++j) {
        const std::vector<Tensor> g =
            run_ok("attention_grad",
                   {qi, split_piece(k, kAxis, kPieces, j), split_piece(v, kAxis, kPieces, j), y, lse,
                    split_piece(dy, kAxis, kPieces, i)},
                   attrs, placed(qi, 4 * i, qi, 4 * j, shape, shape, 3));
        for (size_t e = 0; e < dq.f32.size(); ++e) {
          dq.f32[e] += g[0].f32[e];
          dk[static_cast<size_t>(j)].f32[e] += g[1].f32[e];
          dv[static_cast<size_t>(j)].f32[e] += g[2].f32[e];
        }
      }
      const Tensor want_dq = split_piece(whole_grad[0], kAxis, kPieces, i);
      for (size_t e = 0; e < dq.f32.size(); ++e) CHECK(dq.f32[e] == doctest::Approx(want_dq.f32[e]).epsilon(1e-5).scale(1));
    }
    const Tensor got_dk = concat_pieces(dk, kAxis), got_dv = concat_pieces(dv, kAxis);
    for (size_t e = 0; e < got_dk.f32.size(); ++e) {
      CHECK(got_dk.f32[e] == doctest::Approx(whole_grad[1].f32[e]).epsilon(1e-5).scale(1));
      CHECK(got_dv.f32[e] == doctest::Approx(whole_grad[2].f32[e]).epsilon(1e-5).scale(1));
    }
  }
}

TEST_CASE("attention_merge: a part that saw no key weighs nothing; every SBP signature on 2 and 3 pieces") {
  const Tensor ya = Tensor::uniform({2, 6, 4}, 31), yb = Tensor::uniform({2, 6, 4}, 32);
  Tensor la = Tensor::uniform({2, 6}, 33), lb = Tensor::uniform({2, 6}, 34);
  EXPECT_OK(check_sbp_signatures("attention_merge", {ya, la, yb, lb}, {}, 2));
  EXPECT_OK(check_sbp_signatures("attention_merge", {ya, la, yb, lb}, {}, 3));
  // Equal lse: the mean; one part masked (-inf): the other, bit for bit;
  // both masked: y 0 and lse -inf.
  la.f32[0] = lb.f32[0];
  la.f32[1] = -INFINITY;
  la.f32[2] = lb.f32[2] = -INFINITY;
  const std::vector<Tensor> out = run_ok("attention_merge", {ya, la, yb, lb});
  for (int c = 0; c < 4; ++c) {
    CHECK(out[0].f32[c] == doctest::Approx((ya.f32[c] + yb.f32[c]) / 2).epsilon(1e-6));
    CHECK(out[0].f32[4 + c] == yb.f32[4 + c]);
    CHECK(out[0].f32[8 + c] == 0.0f);
  }
  CHECK(out[1].f32[0] == doctest::Approx(lb.f32[0] + std::log(2.0)).epsilon(1e-6));
  CHECK(out[1].f32[1] == lb.f32[1]);
  CHECK(out[1].f32[2] == -INFINITY);
  const Status s = run_op("attention_merge", {ya, la, yb, Tensor::uniform({2, 5}, 35)}).status();
  CHECK(s.message().find("lse_b [2, 5] [..., T]") != std::string::npos);
}

}  // namespace
}  // namespace rill::testing
