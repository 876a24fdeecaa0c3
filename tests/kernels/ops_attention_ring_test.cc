// Ring attention's steps (kernels/ops/attention.cc, attention_ring.cc):
// attention of one piece of the queries over one piece of the keys, each
// at its place in the whole sequence (input_offsets), then attention_step
// over every other piece in ring order (the piece r places back at step r),
// gives that piece's rows of the whole attention; attention_grad and
// attention_grad_step over the pieces, with the whole rows' y and lse, give
// the whole dq, and their dk and dv parts sum to the whole gradient. Causal
// or not.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/ops/ops.h"
#include "tests/kernels/run_ok.h"
#include "tests/kernels/sbp_check.h"

namespace rill::testing {
namespace {

constexpr int kAxis = 2;  // [batch, heads, T, D]

// Input offsets and whole shapes for a step: q at `q_at`, k and v at
// `k_at` on the sequence's axis, then `rows` more inputs of q's rows (y,
// dy, dq: like q; lse: 'l', without the head axis).
RunOptions placed(const Tensor& q, int64_t q_at, int64_t k_at, const Shape& whole, const std::string& rows = "") {
  RunOptions o;
  o.logical_inputs = {whole, whole, whole};
  Shape qo(q.shape.size(), 0), ko(q.shape.size(), 0);
  qo[kAxis] = q_at;
  ko[kAxis] = k_at;
  o.input_offsets = {qo, ko, ko};
  for (char c : rows) {
    o.logical_inputs.push_back(c == 'l' ? Shape(whole.begin(), whole.end() - 1) : whole);
    o.input_offsets.push_back(c == 'l' ? Shape(qo.begin(), qo.end() - 1) : qo);
  }
  return o;
}

// Values of magnitude < 1 over 12 keys of a head of 4: every output is a
// convex mix or a sum of at most 12 terms of magnitude < 2, each f32
// operation off by a few units of 6e-8 relative, in whatever order the
// pieces come: 1e-5 holds on any CPU, and a key seen twice or missed moves
// an output by a whole term (about 1e-1).
// A tensor's sequence axis (of [batch, heads, T, D], or lse's [batch,
// heads, T]) in the zigzag order of `parts`.
Tensor in_zigzag(const Tensor& x, int64_t parts) {
  if (parts == 1) return x;
  return run_ok("zigzag", {x}, {{"axis", int64_t{kAxis}}, {"parts", parts}})[0];
}

// The same over a sequence in the zigzag order of 3 parts (each piece
// chunks i and 5 - i): the pieces' outputs are the zigzag order of the
// natural whole's, its keys summed in another order (the bound's reason
// holds for any order).
TEST_CASE("attention over pieces of the keys at their places, merged, is the whole attention; its gradients sum") {
  const Shape shape = {1, 2, 12, 4};
  const Tensor q0 = Tensor::uniform(shape, 21), k0 = Tensor::uniform(shape, 22), v0 = Tensor::uniform(shape, 23);
  const Tensor dy0 = Tensor::uniform(shape, 24);
  for (auto [causal, zigzag] : {std::pair<int64_t, int64_t>{0, 1}, {1, 1}, {1, 3}}) {
    CAPTURE(causal);
    CAPTURE(zigzag);
    const Tensor q = in_zigzag(q0, zigzag), k = in_zigzag(k0, zigzag), v = in_zigzag(v0, zigzag),
                 dy = in_zigzag(dy0, zigzag);
    const std::vector<Tensor> natural = run_ok("attention", {q0, k0, v0}, {{"causal", causal}});
    const std::vector<Tensor> natural_grad =
        run_ok("attention_grad", {q0, k0, v0, natural[0], natural[1], dy0}, {{"causal", causal}});
    const std::vector<Tensor> whole = {in_zigzag(natural[0], zigzag), in_zigzag(natural[1], zigzag)};
    const std::vector<Tensor> whole_grad = {in_zigzag(natural_grad[0], zigzag), in_zigzag(natural_grad[1], zigzag),
                                            in_zigzag(natural_grad[2], zigzag)};
    const Attrs attrs{{"causal", causal}, {"zigzag", zigzag}};
    // On one device too: the whole sequence in the order.
    const std::vector<Tensor> one = run_ok("attention", {q, k, v}, attrs);
    for (size_t e = 0; e < one[0].f32.size(); ++e)
      CHECK(one[0].f32[e] == doctest::Approx(whole[0].f32[e]).epsilon(1e-5).scale(1));
    const std::vector<Tensor> one_grad = run_ok("attention_grad", {q, k, v, one[0], one[1], dy}, attrs);
    for (int g = 0; g < 3; ++g)
      for (size_t e = 0; e < one_grad[g].f32.size(); ++e)
        CHECK(one_grad[g].f32[e] == doctest::Approx(whole_grad[g].f32[e]).epsilon(1e-5).scale(1));
    constexpr int kPieces = 3;
    std::vector<Tensor> dk(kPieces, Tensor::zeros({1, 2, 4, 4})), dv = dk;
    for (int i = 0; i < kPieces; ++i) {
      const Tensor qi = split_piece(q, kAxis, kPieces, i);
      Tensor y, lse;
      for (int r = 0; r < kPieces; ++r) {  // ring order: piece i, i - 1, ...
        const int j = (i - r + kPieces) % kPieces;
        const Tensor kj = split_piece(k, kAxis, kPieces, j), vj = split_piece(v, kAxis, kPieces, j);
        if (r == 0) {
          const std::vector<Tensor> own = run_ok("attention", {qi, kj, vj}, attrs, placed(qi, 4 * i, 4 * j, shape));
          y = own[0];
          lse = own[1];
          continue;
        }
        const std::vector<Tensor> step =
            run_ok("attention_step", {qi, kj, vj, y, lse}, attrs, placed(qi, 4 * i, 4 * j, shape, "yl"));
        if (causal != 0 && zigzag == 1 && j > i) {  // wholly in the queries' future: nothing changes
          CHECK(step[0].f32 == y.f32);
          CHECK(step[1].f32 == lse.f32);
        }
        y = step[0];
        lse = step[1];
      }
      const Tensor want_y = split_piece(whole[0], kAxis, kPieces, i),
                   want_lse = split_piece(whole[1], kAxis, kPieces, i);
      for (size_t e = 0; e < y.f32.size(); ++e)
        CHECK(y.f32[e] == doctest::Approx(want_y.f32[e]).epsilon(1e-5).scale(1));
      for (size_t e = 0; e < lse.f32.size(); ++e) CHECK(lse.f32[e] == doctest::Approx(want_lse.f32[e]).epsilon(1e-5));
      const Tensor dyi = split_piece(dy, kAxis, kPieces, i);
      Tensor dq;
      for (int r = 0; r < kPieces; ++r) {
        const int j = (i - r + kPieces) % kPieces;
        std::vector<Tensor> in = {qi, split_piece(k, kAxis, kPieces, j), split_piece(v, kAxis, kPieces, j), y, lse,
                                  dyi};
        if (r > 0) in.push_back(dq);
        const std::vector<Tensor> g = run_ok(r == 0 ? "attention_grad" : "attention_grad_step", in, attrs,
                                             placed(qi, 4 * i, 4 * j, shape, r == 0 ? "yly" : "ylyy"));
        dq = g[0];
        for (size_t e = 0; e < g[1].f32.size(); ++e) {
          dk[static_cast<size_t>(j)].f32[e] += g[1].f32[e];
          dv[static_cast<size_t>(j)].f32[e] += g[2].f32[e];
        }
      }
      const Tensor want_dq = split_piece(whole_grad[0], kAxis, kPieces, i);
      for (size_t e = 0; e < dq.f32.size(); ++e)
        CHECK(dq.f32[e] == doctest::Approx(want_dq.f32[e]).epsilon(1e-5).scale(1));
    }
    const Tensor got_dk = concat_pieces(dk, kAxis), got_dv = concat_pieces(dv, kAxis);
    for (size_t e = 0; e < got_dk.f32.size(); ++e) {
      CHECK(got_dk.f32[e] == doctest::Approx(whole_grad[1].f32[e]).epsilon(1e-5).scale(1));
      CHECK(got_dv.f32[e] == doctest::Approx(whole_grad[2].f32[e]).epsilon(1e-5).scale(1));
    }
  }
}

// The queries split with the keys whole (attention's own sequence split),
// the sequence in the zigzag order of 2 and 3 parts, and pieces that cut
// chunks anywhere (3 rows a piece over chunks of 2): each piece's rows are
// the whole's, its dq too, and the pieces' dk and dv sum to the whole's.
// The bound's reason is the test above's.
TEST_CASE("attention in the zigzag order with the queries split anywhere and the keys whole") {
  const Shape shape = {1, 2, 12, 4};
  const Tensor q0 = Tensor::uniform(shape, 41), k0 = Tensor::uniform(shape, 42), v0 = Tensor::uniform(shape, 43);
  const Tensor dy0 = Tensor::uniform(shape, 44);
  const Attrs natural{{"causal", int64_t{1}}};
  const std::vector<Tensor> y0 = run_ok("attention", {q0, k0, v0}, natural);
  const std::vector<Tensor> g0 = run_ok("attention_grad", {q0, k0, v0, y0[0], y0[1], dy0}, natural);
  auto close = [](const Tensor& got, const Tensor& want) {
    REQUIRE(got.f32.size() == want.f32.size());
    for (size_t e = 0; e < got.f32.size(); ++e)
      CHECK(got.f32[e] == doctest::Approx(want.f32[e]).epsilon(1e-5).scale(1));
  };
  for (int64_t zigzag : {2, 3}) {
    const Tensor q = in_zigzag(q0, zigzag), k = in_zigzag(k0, zigzag), v = in_zigzag(v0, zigzag),
                 dy = in_zigzag(dy0, zigzag), y = in_zigzag(y0[0], zigzag), lse = in_zigzag(y0[1], zigzag);
    const Attrs attrs{{"causal", int64_t{1}}, {"zigzag", zigzag}};
    for (int pieces : {2, 3, 4}) {
      CAPTURE(zigzag);
      CAPTURE(pieces);
      const int64_t rows = 12 / pieces;
      Tensor dk = Tensor::zeros(shape), dv = Tensor::zeros(shape);
      for (int i = 0; i < pieces; ++i) {
        const RunOptions at = placed(q, rows * i, 0, shape, "yly");  // y, lse and dy: the queries' rows
        const Tensor qi = split_piece(q, kAxis, pieces, i);
        const std::vector<Tensor> out = run_ok("attention", {qi, k, v}, attrs, placed(q, rows * i, 0, shape));
        close(out[0], split_piece(y, kAxis, pieces, i));
        close(out[1], split_piece(lse, kAxis, pieces, i));
        const std::vector<Tensor> g = run_ok(
            "attention_grad",
            {qi, k, v, split_piece(y, kAxis, pieces, i), split_piece(lse, kAxis, pieces, i),
             split_piece(dy, kAxis, pieces, i)},
            attrs, at);
        close(g[0], split_piece(in_zigzag(g0[0], zigzag), kAxis, pieces, i));
        for (size_t e = 0; e < dk.f32.size(); ++e) {
          dk.f32[e] += g[1].f32[e];
          dv.f32[e] += g[2].f32[e];
        }
      }
      close(dk, in_zigzag(g0[1], zigzag));
      close(dv, in_zigzag(g0[2], zigzag));
    }
  }
  // The order needs as many keys as queries, their number a multiple of 2 parts.
  Status s = run_op("attention", {q0, k0, v0}, {{"causal", int64_t{1}}, {"zigzag", int64_t{5}}}).status();
  CHECK(s.message().find("attr 'zigzag' = 5: a causal mask in the zigzag order takes as many keys as queries, their "
                         "number a multiple of 10; got 12 queries and 12 keys") != std::string::npos);
}

TEST_CASE("attention_step and attention_grad_step: their leading axes split; bad shapes named") {
  const Tensor q = Tensor::uniform({2, 3, 4, 4}, 31), k = Tensor::uniform({2, 3, 5, 4}, 32),
               v = Tensor::uniform({2, 3, 5, 4}, 33);
  const Tensor y = Tensor::uniform({2, 3, 4, 4}, 34), lse = Tensor::uniform({2, 3, 4}, 35),
               dy = Tensor::uniform(q.shape, 36);
  for (int parallel : {2, 3}) {
    EXPECT_OK(check_sbp_signatures("attention_step", {q, k, v, y, lse}, {}, parallel));
    EXPECT_OK(check_sbp_signatures("attention_grad_step", {q, k, v, y, lse, dy, y}, {}, parallel));
  }
  // A step whose keys are all past its rows leaves the steps' result as it was;
  // one whose keys are all before adds them: lse grows.
  const Attrs causal{{"causal", int64_t{1}}};
  const Shape whole = {2, 3, 12, 4};
  const std::vector<Tensor> future = run_ok("attention_step", {q, q, q, y, lse}, causal, placed(q, 0, 8, whole, "yl"));
  CHECK(future[0].f32 == y.f32);
  CHECK(future[1].f32 == lse.f32);
  const std::vector<Tensor> past = run_ok("attention_step", {q, q, q, y, lse}, causal, placed(q, 8, 0, whole, "yl"));
  for (size_t e = 0; e < lse.f32.size(); ++e) CHECK(past[1].f32[e] > lse.f32[e]);
  Status s = run_op("attention_step", {q, k, v, y, Tensor::uniform({2, 3, 5}, 37)}).status();
  CHECK(s.message().find("the steps' y [2, 3, 4, 4] and lse [2, 3, 5] so far must be f32 [2, 3, 4, 4] and [2, 3, 4]") !=
        std::string::npos);
  s = run_op("attention_grad_step", {q, k, v, y, lse, dy, lse}).status();
  CHECK(s.message().find("the steps' dq [2, 3, 4] so far must be f32 [2, 3, 4, 4]") != std::string::npos);
}

}  // namespace
}  // namespace rill::testing
