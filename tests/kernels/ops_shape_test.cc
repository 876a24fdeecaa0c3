// Layout ops: reshape, transpose, identity, slice, slice_grad, concat.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>

#include "kernels/op.h"
#include "tests/kernels/grad_check.h"
#include "tests/kernels/sbp_check.h"

namespace rill {
namespace {

using testing::Tensor;
using Ints = std::vector<int64_t>;

Tensor iota(Shape shape) {
  Tensor t = Tensor::zeros(std::move(shape));
  for (size_t i = 0; i < t.f32.size(); ++i) t.f32[i] = static_cast<float>(i);
  return t;
}

Tensor run1(const std::string& type, std::vector<Tensor> inputs, const Attrs& attrs) {
  auto out = testing::run_op(type, std::move(inputs), attrs);
  REQUIRE_MESSAGE(out.ok(), out.status().to_string());
  REQUIRE(out->size() == 1);
  return (*out)[0];
}

Status infer_error(const std::string& type, std::vector<TensorMeta> inputs, const Attrs& attrs) {
  std::vector<TensorMeta> outputs;
  return infer_op(*find_op(type), attrs, inputs, &outputs);
}

bool has_sig(const std::vector<SbpSignature>& sigs, const SbpSignature& want) {
  return std::find(sigs.begin(), sigs.end(), want) != sigs.end();
}

std::vector<SbpSignature> sbp_of(const std::string& type, std::vector<TensorMeta> inputs, const Attrs& attrs) {
  return find_op(type)->sbp(attrs, inputs);
}

bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// Rows [begin, end) of axis `axis` of a 2-D tensor, as run_op would see one piece.
Tensor piece_of(const Tensor& t, int axis, int64_t begin, int64_t end) {
  std::vector<int64_t> starts{0, 0}, ends{-1, -1};
  starts[axis] = begin;
  ends[axis] = end;
  return run1("slice", {t}, {{"starts", starts}, {"ends", ends}});
}

Tensor concat(std::vector<Tensor> parts, int64_t axis) { return run1("concat", std::move(parts), {{"axis", axis}}); }

}  // namespace

TEST_CASE("reshape keeps row-major order and resolves one -1") {
  Tensor out = run1("reshape", {iota({2, 3})}, {{"shape", Ints{3, -1}}});
  CHECK(out.shape == Shape{3, 2});
  CHECK(out.f32 == iota({6}).f32);
  CHECK(run1("reshape", {Tensor::floats({1, 1}, {4.f})}, {{"shape", Ints{}}}).shape == Shape{});
  CHECK(run1("reshape", {Tensor::ints({4}, {1, 2, 3, 4})}, {{"shape", Ints{2, 2}}}).i32 ==
        std::vector<int32_t>{1, 2, 3, 4});
  CHECK(testing::check_gradients("reshape", {Tensor::uniform({2, 6}, 1)}, {{"shape", Ints{3, 2, 2}}}, {0}).ok());
}

TEST_CASE("reshape keeps the input's axis where the shape says 0") {
  // Heads split and merged without the sequence's length: [B, T, C] ->
  // [B, T, H, -1] -> [B, T, -1].
  Tensor x = iota({2, 3, 8});
  Tensor heads = run1("reshape", {x}, {{"shape", Ints{0, 0, 4, -1}}});
  CHECK(heads.shape == Shape{2, 3, 4, 2});
  CHECK(heads.f32 == x.f32);
  CHECK(run1("reshape", {heads}, {{"shape", Ints{0, 0, -1}}}).shape == Shape{2, 3, 8});
  CHECK(testing::check_gradients("reshape", {Tensor::uniform({2, 6}, 1)}, {{"shape", Ints{0, 3, -1}}}, {0}).ok());
}

TEST_CASE("reshape rejects shapes that do not fit, naming both") {
  Status s = infer_error("reshape", {{{2, 3}}}, {{"shape", Ints{4, 4}}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s, "[4, 4]"));
  CHECK(contains(s, "[2, 3]"));
  CHECK(contains(s, "'shape'"));
  CHECK(contains(infer_error("reshape", {{{2, 3}}}, {{"shape", Ints{-1, -1}}}), "more than one -1"));
  CHECK(contains(infer_error("reshape", {{{2, 3}}}, {{"shape", Ints{4, -1}}}), "cannot hold"));
  CHECK(contains(infer_error("reshape", {{{2, 3}}}, {{"shape", Ints{-2, 6}}}), "positive"));
  CHECK(contains(infer_error("reshape", {{{2, 3}}}, {{"shape", Ints{0, 0, 0}}}), "0 keeps the input's axis 2"));
  CHECK(contains(infer_error("reshape", {{{2, 3}}}, {{"shape", Ints{0, 4}}}), "[0, 4]"));
  CHECK(contains(infer_error("reshape", {{{2, 3}}}, {}), "missing attr 'shape'"));
  CHECK(contains(infer_error("reshape", {{{2, 3}}}, {{"shape", std::string("6")}}), "list of ints"));
}

TEST_CASE("reshape keeps a split of axis 0 only when axis 0 is unchanged") {
  SbpSignature s0{{Sbp::split(0)}, {Sbp::split(0)}};
  auto same_rows = sbp_of("reshape", {{{6, 4}}}, {{"shape", Ints{6, 2, 2}}});
  CHECK(has_sig(same_rows, s0));
  CHECK(has_sig(same_rows, {{Sbp::partial_sum()}, {Sbp::partial_sum()}}));
  CHECK(has_sig(same_rows, {{Sbp::broadcast()}, {Sbp::broadcast()}}));
  CHECK_FALSE(has_sig(sbp_of("reshape", {{{6, 4}}}, {{"shape", Ints{4, 6}}}), s0));
  // Pieces of [5, 4] split on rows (3 + 2) reshaped to [5, 2, 2] are the output's pieces.
  Tensor x = iota({5, 4});
  Attrs attrs{{"shape", Ints{-1, 2, 2}}};
  Tensor whole = run1("reshape", {x}, attrs);
  Tensor top = run1("reshape", {piece_of(x, 0, 0, 3)}, attrs), bottom = run1("reshape", {piece_of(x, 0, 3, 5)}, attrs);
  std::vector<float> joined = top.f32;
  joined.insert(joined.end(), bottom.f32.begin(), bottom.f32.end());
  CHECK(joined == whole.f32);
}

TEST_CASE("transpose permutes axes") {
  Tensor x = iota({2, 3, 4});
  Tensor out = run1("transpose", {x}, {{"perm", Ints{2, 0, 1}}});
  REQUIRE(out.shape == Shape{4, 2, 3});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(out.f32[(k * 2 + i) * 3 + j] == x.f32[(i * 3 + j) * 4 + k]);
  CHECK(run1("transpose", {Tensor::floats({2, 2}, {1, 2, 3, 4})}, {{"perm", Ints{1, 0}}}).f32 ==
        std::vector<float>{1, 3, 2, 4});
  CHECK(run1("transpose", {Tensor::floats({}, {5})}, {{"perm", Ints{}}}).f32 == std::vector<float>{5});
  // [1, 2, 0] is not its own inverse, so this checks the inverse permutation.
  CHECK(testing::check_gradients("transpose", {Tensor::uniform({2, 3, 4}, 2)}, {{"perm", Ints{1, 2, 0}}}, {0}).ok());
}

TEST_CASE("transpose moves runs of trailing axes it leaves in place as it moves single elements") {
  // Every permutation of 4 axes (those ending in 3, or in 2, 3, move runs),
  // against the element-by-element definition out[i] = x[i permuted].
  const Shape shape{2, 3, 4, 5};
  Tensor x = iota(shape);
  Ints perm{0, 1, 2, 3};
  int permutations = 0;
  do {
    Tensor out = run1("transpose", {x}, {{"perm", perm}});
    Shape expect_shape(4);
    for (int j = 0; j < 4; ++j) expect_shape[j] = shape[perm[j]];
    REQUIRE(out.shape == expect_shape);
    int wrong = 0;
    std::array<int64_t, 4> o{};
    for (o[0] = 0; o[0] < expect_shape[0]; ++o[0])
      for (o[1] = 0; o[1] < expect_shape[1]; ++o[1])
        for (o[2] = 0; o[2] < expect_shape[2]; ++o[2])
          for (o[3] = 0; o[3] < expect_shape[3]; ++o[3]) {
            std::array<int64_t, 4> i{};
            for (int j = 0; j < 4; ++j) i[perm[j]] = o[j];
            const int64_t out_at = ((o[0] * expect_shape[1] + o[1]) * expect_shape[2] + o[2]) * expect_shape[3] + o[3];
            const int64_t in_at = ((i[0] * shape[1] + i[1]) * shape[2] + i[2]) * shape[3] + i[3];
            wrong += out.f32[out_at] != x.f32[in_at];
          }
    CAPTURE(shape_string(perm));
    CHECK(wrong == 0);
    ++permutations;
  } while (std::next_permutation(perm.begin(), perm.end()));
  CHECK(permutations == 24);
}

TEST_CASE("transpose maps S(a) to the output position of a, and checks perm") {
  auto sigs = sbp_of("transpose", {{{2, 3, 4}}}, {{"perm", Ints{2, 0, 1}}});
  CHECK(has_sig(sigs, {{Sbp::split(2)}, {Sbp::split(0)}}));
  CHECK(has_sig(sigs, {{Sbp::split(0)}, {Sbp::split(1)}}));
  CHECK(has_sig(sigs, {{Sbp::split(1)}, {Sbp::split(2)}}));
  CHECK(has_sig(sigs, {{Sbp::partial_sum()}, {Sbp::partial_sum()}}));
  CHECK_FALSE(has_sig(sigs, {{Sbp::split(0)}, {Sbp::split(0)}}));
  // A row-split input's pieces, transposed, are the column pieces of the output.
  Tensor x = iota({5, 3});
  Attrs attrs{{"perm", Ints{1, 0}}};
  Tensor whole = run1("transpose", {x}, attrs);
  CHECK(concat({run1("transpose", {piece_of(x, 0, 0, 3)}, attrs), run1("transpose", {piece_of(x, 0, 3, 5)}, attrs)}, 1)
            .f32 == whole.f32);
  Status dup = infer_error("transpose", {{{2, 3, 4}}}, {{"perm", Ints{0, 0, 1}}});
  CHECK(contains(dup, "not a permutation"));
  CHECK(contains(dup, "[2, 3, 4]"));
  CHECK(contains(infer_error("transpose", {{{2, 3}}}, {{"perm", Ints{0}}}), "rank 2"));
}

TEST_CASE("identity copies any dtype and passes every SBP through") {
  CHECK(run1("identity", {Tensor::ints({3}, {7, 8, 9})}, {}).i32 == std::vector<int32_t>{7, 8, 9});
  auto sigs = sbp_of("identity", {{{2, 3}}}, {});
  for (Sbp s : {Sbp::split(0), Sbp::split(1), Sbp::broadcast(), Sbp::partial_sum()}) CHECK(has_sig(sigs, {{s}, {s}}));
  CHECK(testing::check_gradients("identity", {Tensor::uniform({4}, 3)}, {}, {0}).ok());
}

// depend (activation recompute's copies, compiler/autograd.cc): input 0
// whatever input 1 holds or how it is split; no gradient.
TEST_CASE("depend copies input 0 once input 1 is there, any SBP of input 1 alongside") {
  CHECK(run1("depend", {Tensor::floats({3}, {7, 8, 9}), Tensor::floats({2, 2}, {1, 2, 3, 4})}, {}).f32 ==
        std::vector<float>{7, 8, 9});
  auto sigs = sbp_of("depend", {{{2, 3}}, {{4}}}, {});
  for (Sbp x : {Sbp::split(0), Sbp::split(1), Sbp::broadcast(), Sbp::partial_sum()})
    for (Sbp after : {Sbp::split(0), Sbp::broadcast(), Sbp::partial_sum()}) CHECK(has_sig(sigs, {{x, after}, {x}}));
  CHECK(sigs.size() == 4 * 3);
  CHECK((find_op("depend")->grad == nullptr));
}

TEST_CASE("slice takes a box; -1 ends at the axis' end") {
  Tensor x = iota({3, 4});
  Tensor out = run1("slice", {x}, {{"starts", Ints{1, 1}}, {"ends", Ints{3, -1}}});
  CHECK(out.shape == Shape{2, 3});
  CHECK(out.f32 == std::vector<float>{5, 6, 7, 9, 10, 11});
  Tensor y = iota({2, 3, 4});
  Tensor box = run1("slice", {y}, {{"starts", Ints{1, 0, 2}}, {"ends", Ints{2, 2, 3}}});
  CHECK(box.shape == Shape{1, 2, 1});
  CHECK(box.f32 == std::vector<float>{14, 18});
  Attrs attrs{{"starts", Ints{0, 1, 1}}, {"ends", Ints{-1, 3, 4}}};
  CHECK(testing::check_gradients("slice", {Tensor::uniform({2, 3, 4}, 4)}, attrs, {0}).ok());
}

TEST_CASE("slice keeps splits only on axes it does not cut; pieces agree with the whole") {
  Attrs attrs{{"starts", Ints{1, 0}}, {"ends", Ints{3, -1}}};
  auto sigs = sbp_of("slice", {{{4, 5}}}, attrs);
  CHECK(has_sig(sigs, {{Sbp::split(1)}, {Sbp::split(1)}}));
  CHECK_FALSE(has_sig(sigs, {{Sbp::split(0)}, {Sbp::split(0)}}));
  CHECK(has_sig(sigs, {{Sbp::partial_sum()}, {Sbp::partial_sum()}}));
  Tensor x = iota({4, 5});
  Tensor whole = run1("slice", {x}, attrs);
  CHECK(concat({run1("slice", {piece_of(x, 1, 0, 3)}, attrs), run1("slice", {piece_of(x, 1, 3, 5)}, attrs)}, 1).f32 ==
        whole.f32);
  // The gradient's pieces likewise.
  Attrs grad_attrs = attrs;
  grad_attrs.set("shape", Ints{4, 5});
  Tensor dy = iota({2, 5});
  Tensor dx = run1("slice_grad", {dy}, grad_attrs);
  CHECK(has_sig(sbp_of("slice_grad", {{{2, 5}}}, grad_attrs), {{Sbp::split(1)}, {Sbp::split(1)}}));
  Attrs left = grad_attrs, right = grad_attrs;
  left.set("shape", Ints{4, 3});
  right.set("shape", Ints{4, 2});
  CHECK(
      concat({run1("slice_grad", {piece_of(dy, 1, 0, 3)}, left), run1("slice_grad", {piece_of(dy, 1, 3, 5)}, right)}, 1)
          .f32 == dx.f32);
}

TEST_CASE("slice_grad pads with zeros and is itself differentiable") {
  Attrs attrs{{"starts", Ints{1, 2}}, {"ends", Ints{2, 4}}, {"shape", Ints{3, 4}}};
  Tensor dx = run1("slice_grad", {Tensor::floats({1, 2}, {1, 2})}, attrs);
  CHECK(dx.shape == Shape{3, 4});
  CHECK(dx.f32 == std::vector<float>{0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0});
  CHECK(testing::check_gradients("slice_grad", {Tensor::uniform({1, 2}, 5)}, attrs, {0}).ok());
  Status s = infer_error("slice_grad", {{{2, 2}}}, attrs);
  CHECK(contains(s, "[2, 2]"));
  CHECK(contains(s, "[1, 2]"));
}

TEST_CASE("slice errors name the attrs and the shape") {
  Status s = infer_error("slice", {{{3, 4}}}, {{"starts", Ints{0, 2}}, {"ends", Ints{3, 5}}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s, "'ends' = [3, 5]"));
  CHECK(contains(s, "axis 1"));
  CHECK(contains(s, "[3, 4]"));
  CHECK(contains(infer_error("slice", {{{3, 4}}}, {{"starts", Ints{2, 0}}, {"ends", Ints{1, -1}}}), "axis 0"));
  CHECK(contains(infer_error("slice", {{{3, 4}}}, {{"starts", Ints{0}}, {"ends", Ints{1}}}), "one entry per axis"));
  CHECK(contains(infer_error("slice", {{{3, 4}}}, {{"ends", Ints{1, 1}}}), "missing attr 'starts'"));
}

TEST_CASE("concat joins along an axis, including a negative one") {
  Tensor a = Tensor::floats({2, 1}, {1, 2}), b = Tensor::floats({2, 2}, {3, 4, 5, 6});
  Tensor out = run1("concat", {a, b}, {{"axis", int64_t{1}}});
  CHECK(out.shape == Shape{2, 3});
  CHECK(out.f32 == std::vector<float>{1, 3, 4, 2, 5, 6});
  CHECK(run1("concat", {a, b}, {{"axis", int64_t{-1}}}).f32 == out.f32);
  Tensor rows = run1("concat", {iota({1, 2}), iota({2, 2}), iota({1, 2})}, {{"axis", int64_t{0}}});
  CHECK(rows.f32 == std::vector<float>{0, 1, 0, 1, 2, 3, 0, 1});
  CHECK(run1("concat", {Tensor::ints({1}, {4}), Tensor::ints({2}, {5, 6})}, {}).i32 == std::vector<int32_t>{4, 5, 6});
  CHECK(testing::check_gradients(
            "concat", {Tensor::uniform({2, 1, 3}, 6), Tensor::uniform({2, 2, 3}, 7), Tensor::uniform({2, 3, 3}, 8)},
            {{"axis", int64_t{1}}}, {0, 1, 2})
            .ok());
}

TEST_CASE("concat's gradient rule slices only for inputs that need it") {
  Tensor a = iota({2, 1}), b = iota({2, 2});
  Attrs attrs{{"axis", int64_t{1}}};
  Tensor out = run1("concat", {a, b}, attrs);
  testing::EagerGradBuilder builder("concat", attrs, {a, b}, {out}, {Tensor::floats({2, 3}, {1, 2, 3, 4, 5, 6})},
                                    {false, true});
  REQUIRE(find_op("concat")->grad(builder).ok());
  REQUIRE(builder.status().ok());
  CHECK(builder.input_grad(0) == nullptr);
  REQUIRE(builder.input_grad(1) != nullptr);
  CHECK(builder.input_grad(1)->f32 == std::vector<float>{2, 3, 5, 6});
  CHECK(builder.added_ops() == std::vector<std::string>{"slice"});
}

TEST_CASE("concat SBP and errors") {
  Attrs attrs{{"axis", int64_t{1}}};
  auto sigs = sbp_of("concat", {{{2, 1}}, {{2, 2}}, {{2, 3}}}, attrs);
  CHECK(has_sig(sigs, {{Sbp::split(0), Sbp::split(0), Sbp::split(0)}, {Sbp::split(0)}}));
  CHECK(has_sig(sigs, {std::vector<Sbp>(3, Sbp::partial_sum()), {Sbp::partial_sum()}}));
  CHECK_FALSE(has_sig(sigs, {std::vector<Sbp>(3, Sbp::split(1)), {Sbp::split(1)}}));
  Status s = infer_error("concat", {{{2, 1}}, {{3, 2}}}, attrs);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s, "input 1 has shape [3, 2]"));
  CHECK(contains(s, "[2, 1]"));
  CHECK(contains(infer_error("concat", {{{2}, DType::kF32}, {{2}, DType::kI32}}, {}), "i32"));
  CHECK(contains(infer_error("concat", {{{2, 1}}}, {{"axis", int64_t{2}}}), "'axis' = 2"));
  CHECK(contains(infer_error("concat", {{{}}}, {}), "scalars"));
}

TEST_CASE("every SBP signature of the layout ops holds when run on pieces") {
  auto check = [](const std::string& type, std::vector<Tensor> inputs, const Attrs& attrs) {
    for (int parallel : {2, 3}) {
      Status s = testing::check_sbp_signatures(type, inputs, attrs, parallel);
      CHECK_MESSAGE(s.ok(), s.to_string());
    }
  };
  // Row pieces are sized from the logical shape, so axis 0 is written as -1.
  check("reshape", {Tensor::uniform({7, 4}, 1)}, {{"shape", Ints{-1, 2, 2}}});
  check("reshape", {Tensor::uniform({7, 4}, 1)}, {{"shape", Ints{4, 7}}});
  check("transpose", {Tensor::uniform({3, 4, 5}, 2)}, {{"perm", Ints{2, 0, 1}}});
  check("identity", {Tensor::uniform({5, 3}, 3)}, {});
  check("depend", {Tensor::uniform({5, 3}, 3), Tensor::uniform({4, 2}, 8)}, {});
  check("slice", {Tensor::uniform({4, 5, 3}, 4)}, {{"starts", Ints{1, 0, 0}}, {"ends", Ints{3, -1, -1}}});
  check("concat", {Tensor::uniform({5, 1}, 5), Tensor::uniform({5, 2}, 6), Tensor::uniform({5, 3}, 7)},
        {{"axis", int64_t{1}}});
}

TEST_CASE("layout ops are registered as differentiable compute ops") {
  for (const char* type : {"reshape", "transpose", "identity", "slice", "slice_grad", "concat"}) {
    const OpDef* def = find_op(type);
    REQUIRE_MESSAGE(def != nullptr, type);
    CHECK(def->role == OpRole::kCompute);
    CHECK((def->grad != nullptr));
    CHECK((def->cpu != nullptr));
  }
  CHECK(find_op("concat")->num_inputs == -1);
}

}  // namespace rill

namespace rill {
namespace {

// The embedding lookup (kernels/ops/embedding.cc). Values are copies and sums
// of small integers: exact.
TEST_CASE("embedding gathers the rows its ids name; its gradient adds the rows back, repeats summed") {
  Tensor table = Tensor::zeros({4, 3});
  for (size_t i = 0; i < table.f32.size(); ++i) table.f32[i] = static_cast<float>(i);
  const Tensor ids = Tensor::ints({2, 2}, {3, 0, 3, 1});
  const Tensor out = testing::run_op("embedding", {ids, table}, {}).value()[0];
  CHECK(out.shape == Shape{2, 2, 3});
  CHECK(out.f32 == std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5});
  Tensor dout = Tensor::zeros({2, 2, 3});
  for (size_t i = 0; i < dout.f32.size(); ++i) dout.f32[i] = 1.0f + static_cast<float>(i % 3);
  const Tensor dtable = testing::run_op("embedding_grad", {ids, dout}, {{"rows", int64_t{4}}}).value()[0];
  CHECK(dtable.shape == Shape{4, 3});
  // Row 3 twice, rows 0 and 1 once, row 2 never.
  CHECK(dtable.f32 == std::vector<float>{1, 2, 3, 1, 2, 3, 0, 0, 0, 2, 4, 6});
  CHECK(testing::check_gradients("embedding", {ids, Tensor::uniform({4, 3}, 8)}, {}, {1}).ok());
}

// A distributed lookup table's blocks: each gives the rows it holds and
// zeros for the others, so the blocks' outputs add up to the whole lookup,
// and each block's gradient is its rows of the whole gradient.
TEST_CASE("embedding of table blocks (row_offset, total_rows) adds up to the whole table's") {
  Tensor table = Tensor::zeros({5, 2});
  for (size_t i = 0; i < table.f32.size(); ++i) table.f32[i] = static_cast<float>(i + 1);
  const Tensor ids = Tensor::ints({4}, {4, 0, 2, 3});
  const Tensor whole = testing::run_op("embedding", {ids, table}, {}).value()[0];
  const Tensor top = piece_of(table, 0, 0, 3), bottom = piece_of(table, 0, 3, 5);
  const Tensor a = testing::run_op("embedding", {ids, top}, {{"total_rows", int64_t{5}}}).value()[0];
  const Tensor b =
      testing::run_op("embedding", {ids, bottom}, {{"total_rows", int64_t{5}}, {"row_offset", int64_t{3}}}).value()[0];
  std::vector<float> sum(whole.f32.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = a.f32[i] + b.f32[i];
  CHECK(sum == whole.f32);
  CHECK(b.f32 == std::vector<float>{9, 10, 0, 0, 0, 0, 7, 8});
  const Tensor dout = Tensor::uniform({4, 2}, 11);
  const Tensor dwhole = testing::run_op("embedding_grad", {ids, dout}, {{"rows", int64_t{5}}}).value()[0];
  const Tensor dbottom =
      testing::run_op("embedding_grad", {ids, dout},
                      {{"rows", int64_t{2}}, {"total_rows", int64_t{5}}, {"row_offset", int64_t{3}}})
          .value()[0];
  CHECK(dbottom.f32 == std::vector<float>(dwhole.f32.begin() + 6, dwhole.f32.end()));
  CHECK(testing::check_gradients("embedding", {ids, bottom}, {{"total_rows", int64_t{5}}, {"row_offset", int64_t{3}}},
                                 {1})
            .ok());
  // Ids are checked against the whole table; a block that does not fit is named.
  auto bad = testing::run_op("embedding", {Tensor::ints({1}, {5}), bottom}, {{"total_rows", int64_t{5}}, {"row_offset", int64_t{3}}});
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.status(), "id 5 at position 0 is outside the table's 5 rows"));
  CHECK(contains(infer_error("embedding", {{{1}, DType::kI32}, {{2, 2}}}, {{"total_rows", int64_t{5}}, {"row_offset", int64_t{4}}}),
                 "a block of 2 rows at row_offset 4 does not fit in total_rows 5"));
}

// A trainer's mask of a block's lookup: the rows of the block's ids kept,
// the others zero; a block's lookup passes through it unchanged, and its
// gradient is the mask of the output's gradient (the op itself).
TEST_CASE("embedding_mask keeps the rows of a block's ids; a block's lookup passes through it unchanged") {
  Tensor table = Tensor::zeros({5, 2});
  for (size_t i = 0; i < table.f32.size(); ++i) table.f32[i] = static_cast<float>(i + 1);
  const Tensor ids = Tensor::ints({2, 2}, {4, 0, 2, 3});
  const Attrs block = {{"rows", int64_t{2}}, {"total_rows", int64_t{5}}, {"row_offset", int64_t{3}}};
  const Tensor x = Tensor::uniform({2, 2, 2}, 12);
  const Tensor masked = testing::run_op("embedding_mask", {ids, x}, block).value()[0];
  CHECK(masked.shape == Shape{2, 2, 2});
  CHECK(masked.f32 == std::vector<float>{x.f32[0], x.f32[1], 0, 0, 0, 0, x.f32[6], x.f32[7]});  // ids 4 and 3
  const Attrs lookup = {{"total_rows", int64_t{5}}, {"row_offset", int64_t{3}}};
  const Tensor bottom = piece_of(table, 0, 3, 5);
  const Tensor looked = testing::run_op("embedding", {ids, bottom}, lookup).value()[0];
  CHECK(testing::run_op("embedding_mask", {ids, looked}, block).value()[0].f32 == looked.f32);
  CHECK(testing::check_gradients("embedding_mask", {ids, x}, block, {1}).ok());
  auto bad = testing::run_op("embedding_mask", {Tensor::ints({1}, {7}), Tensor::zeros({1, 2})}, block);
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.status(), "op 'embedding_mask': id 7 at position 0 is outside the table's 5 rows"));
  CHECK(contains(infer_error("embedding_mask", {{{2}, DType::kI32}, {{2, 3, 4}}}, block),
                 "x must be f32 shaped like ids [2] plus one axis"));
  CHECK(contains(infer_error("embedding_mask", {{{2}, DType::kI32}, {{2, 4}}}, {}), "attr rows must be >= 1"));
  const Tensor ids6 = Tensor::ints({6, 2}, {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0});
  const Attrs middle = {{"rows", int64_t{2}}, {"total_rows", int64_t{6}}, {"row_offset", int64_t{2}}};
  for (int parallel : {2, 3}) {
    Status s = testing::check_sbp_signatures("embedding_mask", {ids6, Tensor::uniform({6, 2, 4}, 13)}, middle, parallel);
    CHECK_MESSAGE(s.ok(), s.to_string());
  }
}

TEST_CASE("embedding: an id outside the table, or a table that is not [rows, dim], is named") {
  auto bad = testing::run_op("embedding", {Tensor::ints({3}, {0, 4, 1}), Tensor::zeros({4, 2})}, {});
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.status(), "id 4 at position 1 is outside the table's 4 rows"));
  auto negative = testing::run_op("embedding_grad", {Tensor::ints({1}, {-1}), Tensor::zeros({1, 2})},
                                  {{"rows", int64_t{4}}});
  REQUIRE_FALSE(negative.ok());
  CHECK(contains(negative.status(), "id -1 at position 0"));
  CHECK(contains(infer_error("embedding", {{{3}, DType::kF32}, {{4, 2}}}, {}), "ids must be i32"));
  CHECK(contains(infer_error("embedding", {{{3}, DType::kI32}, {{4}}}, {}), "the table must be f32 [rows, dim]"));
}

TEST_CASE("every SBP signature of embedding and its gradient holds when run on pieces") {
  const Tensor ids = Tensor::ints({6, 2}, {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0});
  for (int parallel : {2, 3}) {
    Status s = testing::check_sbp_signatures("embedding", {ids, Tensor::uniform({6, 4}, 9)}, {}, parallel);
    CHECK_MESSAGE(s.ok(), s.to_string());
    s = testing::check_sbp_signatures("embedding_grad", {ids, Tensor::uniform({6, 2, 4}, 10)}, {{"rows", int64_t{6}}},
                                      parallel);
    CHECK_MESSAGE(s.ok(), s.to_string());
  }
}

}  // namespace
}  // namespace rill
