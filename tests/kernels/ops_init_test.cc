// Initializer ops: fill, uniform, normal, xavier_uniform, kaiming_uniform.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "kernels/op.h"
#include "tests/kernels/grad_check.h"

namespace rill {
namespace {

using testing::Tensor;
using Ints = std::vector<int64_t>;

Tensor make(const std::string& type, Attrs attrs, const testing::RunOptions& options = {}) {
  auto out = testing::run_op(type, {}, attrs, options);
  REQUIRE_MESSAGE(out.ok(), out.status().to_string());
  REQUIRE(out->size() == 1);
  return (*out)[0];
}

Status infer_status(const std::string& type, const Attrs& attrs) {
  std::vector<TensorMeta> outputs;
  return infer_op(*find_op(type), attrs, {}, &outputs);
}

bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

struct Moments {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

Moments moments(const std::vector<float>& values) {
  Moments m;
  for (float v : values) m.mean += v;
  m.mean /= static_cast<double>(values.size());
  for (float v : values) m.stddev += (v - m.mean) * (v - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(values.size()));
  m.min = *std::min_element(values.begin(), values.end());
  m.max = *std::max_element(values.begin(), values.end());
  return m;
}

Attrs with_shape(Attrs attrs, Shape shape) {
  attrs.set("shape", std::vector<int64_t>(shape));
  return attrs;
}

// Makes the box [offset, offset + piece) of a `logical` tensor as the device
// holding that piece would: the output is the piece, the logical shape and
// offset come through the context.
Tensor make_piece(const std::string& type, const Attrs& attrs, Shape logical, Shape piece,
                  std::vector<int64_t> offset) {
  testing::RunOptions options;
  options.logical_output = logical;
  options.output_offset = offset;
  return make(type, with_shape(attrs, piece), options);
}

const char* const kRandomTypes[] = {"uniform", "normal", "xavier_uniform", "kaiming_uniform"};

}  // namespace

TEST_CASE("fill writes its value in either dtype") {
  CHECK(make("fill", {{"shape", Ints{2, 2}}, {"value", 2.5}}).f32 == std::vector<float>(4, 2.5f));
  CHECK(make("fill", {{"shape", Ints{3}}}).f32 == std::vector<float>(3, 0.0f));
  Tensor ints = make("fill", {{"shape", Ints{3}}, {"value", int64_t{7}}, {"dtype", std::string("i32")}});
  CHECK(ints.dtype == DType::kI32);
  CHECK(ints.i32 == std::vector<int32_t>(3, 7));
  CHECK(make("fill", {{"shape", Ints{}}, {"value", 1.0}}).f32 == std::vector<float>{1.0f});
}

TEST_CASE("random initializers are deterministic functions of the seed") {
  for (const char* type : kRandomTypes) {
    CAPTURE(type);
    Attrs attrs{{"shape", Ints{8, 16}}, {"seed", int64_t{42}}};
    Tensor a = make(type, attrs), b = make(type, attrs);
    CHECK(a.f32 == b.f32);
    attrs.set("seed", int64_t{43});
    Tensor c = make(type, attrs);
    int same = 0;
    for (size_t i = 0; i < a.f32.size(); ++i) same += a.f32[i] == c.f32[i];
    CHECK(same < 3);
    // Neighbouring elements are not copies of each other.
    CHECK(moments(a.f32).stddev > 0);
  }
}

TEST_CASE("a split variable's pieces are exactly the pieces of the whole") {
  Shape logical{7, 5};
  for (const char* type : kRandomTypes) {
    CAPTURE(type);
    Attrs attrs{{"seed", int64_t{9}}};
    Tensor whole = make(type, with_shape(attrs, logical));
    // S(0) over 3 devices: rows 0-2, 3-4, 5-6.
    std::vector<float> rows;
    for (auto [begin, end] : {std::pair{0, 3}, std::pair{3, 5}, std::pair{5, 7}}) {
      Tensor piece = make_piece(type, attrs, logical, {end - begin, 5}, {begin, 0});
      rows.insert(rows.end(), piece.f32.begin(), piece.f32.end());
    }
    CHECK(rows == whole.f32);
    // S(1) over 2 devices (columns 0-2 and 3-4), and a 2-D box.
    Tensor left = make_piece(type, attrs, logical, {7, 3}, {0, 0});
    Tensor right = make_piece(type, attrs, logical, {7, 2}, {0, 3});
    Tensor box = make_piece(type, attrs, logical, {2, 2}, {4, 1});
    for (int r = 0; r < 7; ++r)
      for (int c = 0; c < 5; ++c) {
        float want = whole.f32[r * 5 + c];
        CHECK(want == (c < 3 ? left.f32[r * 3 + c] : right.f32[r * 2 + c - 3]));
        if (r >= 4 && r < 6 && c >= 1 && c < 3) CHECK(want == box.f32[(r - 4) * 2 + c - 1]);
      }
  }
}

TEST_CASE("uniform covers [low, high) with the right moments") {
  Tensor t = make("uniform", {{"shape", Ints{100, 100}}, {"low", -2.0}, {"high", 4.0}, {"seed", int64_t{1}}});
  Moments m = moments(t.f32);
  CHECK(m.min >= -2.0);
  CHECK(m.max < 4.0);
  CHECK(m.min < -1.9);
  CHECK(m.max > 3.9);
  CHECK(std::fabs(m.mean - 1.0) < 0.06);  // 3 standard errors: 1.73 / 100
  CHECK(std::fabs(m.stddev - 6.0 / std::sqrt(12.0)) < 0.05);
  // Defaults are [0, 1).
  Moments unit = moments(make("uniform", {{"shape", Ints{10000}}}).f32);
  CHECK(unit.min >= 0.0);
  CHECK(unit.max < 1.0);
  CHECK(std::fabs(unit.mean - 0.5) < 0.02);
}

TEST_CASE("normal has the requested mean and std") {
  Tensor t = make("normal", {{"shape", Ints{10000}}, {"mean", 1.0}, {"std", 2.0}, {"seed", int64_t{3}}});
  Moments m = moments(t.f32);
  CHECK(std::fabs(m.mean - 1.0) < 0.06);  // 3 standard errors: 2 / sqrt(10000) = 0.02
  CHECK(std::fabs(m.stddev - 2.0) < 0.06);
  int beyond_two_sigma = 0;
  for (float v : t.f32) beyond_two_sigma += std::fabs(v - 1.0) > 4.0;
  CHECK(beyond_two_sigma > 350);  // about 4.6% of 10000
  CHECK(beyond_two_sigma < 560);
  CHECK(std::all_of(t.f32.begin(), t.f32.end(), [](float v) { return std::isfinite(v); }));
}

TEST_CASE("xavier_uniform and kaiming_uniform use the logical fans") {
  double xavier_bound = std::sqrt(6.0 / (100 + 200));
  Moments x = moments(make("xavier_uniform", {{"shape", Ints{100, 200}}, {"seed", int64_t{5}}}).f32);
  CHECK(x.min >= -xavier_bound);
  CHECK(x.max <= xavier_bound);
  CHECK(x.max > 0.98 * xavier_bound);
  CHECK(std::fabs(x.mean) < 0.02 * xavier_bound);
  CHECK(std::fabs(x.stddev - xavier_bound / std::sqrt(3.0)) < 0.02 * xavier_bound);

  double kaiming_bound = std::sqrt(6.0 / 100);
  Moments k = moments(make("kaiming_uniform", {{"shape", Ints{100, 50}}, {"seed", int64_t{5}}}).f32);
  CHECK(k.min >= -kaiming_bound);
  CHECK(k.max <= kaiming_bound);
  CHECK(k.max > 0.98 * kaiming_bound);
  CHECK(std::fabs(k.stddev - kaiming_bound / std::sqrt(3.0)) < 0.02 * kaiming_bound);

  // 1-D: fan_in = fan_out = length.
  Moments bias = moments(make("xavier_uniform", {{"shape", Ints{3000}}}).f32);
  CHECK(bias.max <= std::sqrt(6.0 / 6000));
  CHECK(bias.max > 0.95 * std::sqrt(6.0 / 6000));

  // A piece of a split variable takes its bound from the logical shape.
  Tensor piece = make_piece("kaiming_uniform", {}, {100, 50}, {10, 50}, {0, 0});
  Tensor whole = make("kaiming_uniform", {{"shape", Ints{100, 50}}});
  CHECK(std::equal(piece.f32.begin(), piece.f32.end(), whole.f32.begin()));
}

TEST_CASE("initializers are registered with no inputs and a broadcast output") {
  for (const char* type : {"fill", "uniform", "normal", "xavier_uniform", "kaiming_uniform"}) {
    const OpDef* def = find_op(type);
    REQUIRE_MESSAGE(def != nullptr, type);
    CHECK(def->role == OpRole::kInitializer);
    CHECK(def->num_inputs == 0);
    CHECK((def->grad == nullptr));
    auto sigs = def->sbp({{"shape", Ints{4, 4}}}, {});
    REQUIRE(sigs.size() == 1);
    CHECK(sigs[0].inputs.empty());
    CHECK(sigs[0].outputs == std::vector<Sbp>{Sbp::broadcast()});
  }
}

TEST_CASE("initializer attrs are checked with clear messages") {
  CHECK(contains(infer_status("fill", {}), "missing attr 'shape'"));
  Status zero = infer_status("uniform", {{"shape", Ints{3, 0}}});
  CHECK(zero.code() == Code::kInvalidArgument);
  CHECK(contains(zero, "[3, 0]"));
  CHECK(contains(infer_status("fill", {{"shape", Ints{2}}, {"dtype", std::string("f64")}}), "'dtype' = 'f64'"));
  CHECK(contains(infer_status("fill", {{"shape", Ints{2}}, {"dtype", int64_t{1}}}), "'dtype' must be a string"));
  CHECK(contains(infer_status("normal", {{"shape", Ints{2}}, {"dtype", std::string("i32")}}), "f32"));
  CHECK(contains(infer_status("uniform", {{"shape", Ints{2}}, {"low", 1.0}, {"high", 0.0}}), "'low' = 1"));
  CHECK(contains(infer_status("normal", {{"shape", Ints{2}}, {"std", -1.0}}), "'std' = -1"));
  CHECK(contains(infer_status("xavier_uniform", {{"shape", Ints{2, 3, 4}}}), "1-D or 2-D"));
  CHECK(contains(infer_status("kaiming_uniform", {{"shape", Ints{}}}), "1-D or 2-D"));
  CHECK(contains(infer_status("uniform", {{"shape", Ints{2}}, {"seed", std::string("x")}}), "'seed' must be an int"));
  std::vector<TensorMeta> outputs;
  CHECK(contains(infer_op(*find_op("fill"), {{"shape", Ints{2}}}, std::vector<TensorMeta>{{{2}}}, &outputs),
                 "takes 0 input(s)"));
}

}  // namespace rill
