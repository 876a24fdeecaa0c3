// 16-bit floats (base/half.h) and the ops that take them: conversions exact
// both ways on every bit pattern and rounding to nearest even from float;
// cast between f32, bf16 and f16 (values, gradient, SBP signatures); the
// layout ops moving 2-byte elements; fill and ones_like writing values, not
// bit patterns.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "kernels/tensor.h"
#include "tests/kernels/grad_check.h"
#include "tests/kernels/run_ok.h"
#include "tests/kernels/sbp_check.h"

using namespace rill;
using rill::testing::Tensor;

namespace {

float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Whether h is the nearest of its type to x, ties to an even last bit: no
// neighbour (the patterns one above and one below, same sign) is nearer.
template <typename H>
bool nearest_even(float x, H h) {
  const double want = x, got = h.to_float();
  if (std::isinf(got)) {  // only what rounds past the largest finite value
    const double largest = H::from_bits(static_cast<uint16_t>((h.bits & 0x8000u) | (h.bits & 0x7fffu) - 1)).to_float();
    const double ulp = largest - H::from_bits(static_cast<uint16_t>((h.bits & 0x8000u) | (h.bits & 0x7fffu) - 2)).to_float();
    return std::fabs(want) >= std::fabs(largest) + ulp / 2;
  }
  for (int step : {-1, 1}) {
    const uint16_t magnitude = h.bits & 0x7fffu;
    if ((step < 0 && magnitude == 0) || (step > 0 && magnitude >= 0x7f7fu && std::is_same_v<H, BFloat16>) ||
        (step > 0 && magnitude >= 0x7bffu && std::is_same_v<H, Float16>))
      continue;
    const H other = H::from_bits(static_cast<uint16_t>((h.bits & 0x8000u) | (magnitude + step)));
    const double d_got = std::fabs(want - got), d_other = std::fabs(want - static_cast<double>(other.to_float()));
    if (d_other < d_got) return false;
    if (d_other == d_got && (h.bits & 1u)) return false;  // a tie kept the odd one
  }
  return true;
}

template <typename H>
void check_type() {
  // Every bit pattern converts to float and back unchanged (NaNs stay NaN).
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const H h = H::from_bits(static_cast<uint16_t>(b));
    const float f = h.to_float();
    if (std::isnan(f)) {
      CHECK(std::isnan(H::from_float(f).to_float()));
      continue;
    }
    CHECK_MESSAGE(H::from_float(f).bits == b, "pattern " << b);
  }
  // Floats of every exponent round to the nearest, ties to even: random
  // bits, and the exact midpoints between neighbours.
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_float(rng());
    if (std::isnan(x)) continue;
    const H h = H::from_float(x);
    REQUIRE_MESSAGE(nearest_even(x, h), "x = " << x << ", got " << h.to_float());
  }
  for (uint32_t b = 0; b < 0x7c00u; b += 7) {
    const double lo = H::from_bits(static_cast<uint16_t>(b)).to_float();
    const double hi = H::from_bits(static_cast<uint16_t>(b + 1)).to_float();
    const float mid = static_cast<float>((lo + hi) / 2);
    if (static_cast<double>(mid) != (lo + hi) / 2) continue;  // not a float
    CHECK(H::from_float(mid).bits == ((b & 1u) ? b + 1 : b));
  }
}

}  // namespace

TEST_CASE("bf16 and f16 convert exactly both ways and round to nearest even from float") {
  check_type<BFloat16>();
  check_type<Float16>();
  CHECK(BFloat16::from_float(1.0f).bits == 0x3f80);
  CHECK(BFloat16::from_float(-2.5f).bits == 0xc020);
  CHECK(Float16::from_float(1.0f).bits == 0x3c00);
  CHECK(Float16::from_float(65504.0f).bits == 0x7bff);
  CHECK(Float16::from_float(65520.0f).bits == 0x7c00);  // the midpoint past the largest: infinity
  CHECK(Float16::from_float(std::ldexp(1.0f, -24)).bits == 0x0001);
  CHECK(Float16::from_float(std::ldexp(1.0f, -25)).bits == 0x0000);  // a tie: to the even zero
  CHECK(Float16::from_float(std::ldexp(3.0f, -26)).bits == 0x0001);
  CHECK(Float16::from_float(-0.0f).bits == 0x8000);
}

TEST_CASE("dtypes bf16 and f16: names, sizes, and elements written as values") {
  DType d;
  REQUIRE(parse_dtype("bf16", &d));
  CHECK(d == DType::kBF16);
  REQUIRE(parse_dtype("float16", &d));
  CHECK(d == DType::kF16);
  CHECK(dtype_size(DType::kBF16) == 2);
  CHECK(dtype_size(DType::kF16) == 2);
  CHECK(is_float(DType::kBF16));
  CHECK_FALSE(is_float(DType::kI32));
  // fill and ones_like write the value in the dtype, not a bit pattern.
  auto filled = testing::run_ok("fill", {}, {{"shape", std::vector<int64_t>{3}}, {"value", 0.5}, {"dtype", std::string("bf16")}});
  CHECK(filled[0].dtype == DType::kBF16);
  CHECK(filled[0].as_floats() == std::vector<float>{0.5f, 0.5f, 0.5f});
  auto ones = testing::run_ok("ones_like", {Tensor::halves({2}, DType::kF16, {3.0f, 4.0f})});
  CHECK(ones[0].as_floats() == std::vector<float>{1.0f, 1.0f});
}

// Every value converts as base/half.h says: the same bits as rounding it
// directly, and back to f32 exactly.
TEST_CASE("cast converts between f32, bf16 and f16 and refuses other dtypes") {
  const Tensor x = Tensor::uniform({4, 33}, 3, -300.0f, 300.0f);
  for (DType to : {DType::kBF16, DType::kF16}) {
    CAPTURE(dtype_name(to));
    auto narrow = testing::run_ok("cast", {x}, {{"dtype", std::string(dtype_name(to))}});
    REQUIRE(narrow[0].dtype == to);
    const Tensor want = Tensor::halves(x.shape, to, x.f32);
    CHECK(narrow[0].h16 == want.h16);
    auto wide = testing::run_ok("cast", {narrow[0]}, {{"dtype", std::string("f32")}});
    CHECK(wide[0].f32 == want.as_floats());
    // Between the 16-bit types: through float, one rounding.
    const DType other = to == DType::kBF16 ? DType::kF16 : DType::kBF16;
    auto across = testing::run_ok("cast", {narrow[0]}, {{"dtype", std::string(dtype_name(other))}});
    CHECK(across[0].h16 == Tensor::halves(x.shape, other, want.as_floats()).h16);
  }
  auto bad = testing::run_op("cast", {Tensor::ints({2}, {1, 2})}, {{"dtype", std::string("bf16")}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("cast converts between f32, bf16 and f16, not i32 to bf16") != std::string::npos);
  auto unnamed = testing::run_op("cast", {x}, {{"dtype", std::string("f64")}});
  REQUIRE_FALSE(unnamed.ok());
  CHECK(unnamed.status().message().find("attr 'dtype' must name a dtype") != std::string::npos);
}

TEST_CASE("cast's gradient casts back to the input's dtype; its SBP signatures hold on 2 and 3 pieces") {
  const Tensor x = Tensor::uniform({3, 5}, 4);
  auto y = testing::run_ok("cast", {x}, {{"dtype", std::string("bf16")}});
  const Tensor dy = Tensor::halves({3, 5}, DType::kBF16, Tensor::uniform({3, 5}, 6).f32);
  testing::EagerGradBuilder g("cast", {{"dtype", std::string("bf16")}}, {x}, {y[0]}, {dy}, {true});
  REQUIRE(find_op("cast")->grad(g).ok());
  REQUIRE(g.status().ok());
  const Tensor* dx = g.input_grad(0);
  REQUIRE(dx != nullptr);
  CHECK(dx->dtype == DType::kF32);
  CHECK(dx->f32 == dy.as_floats());  // widening is exact
  // Back from bf16 to f32: an f32 gradient passes through unrounded (a
  // 16-bit value's gradient is f32).
  auto back = testing::run_ok("cast", {y[0]}, {{"dtype", std::string("f32")}});
  const Tensor dz = Tensor::uniform({3, 5}, 7);
  testing::EagerGradBuilder g2("cast", {{"dtype", std::string("f32")}}, {y[0]}, {back[0]}, {dz}, {true});
  REQUIRE(find_op("cast")->grad(g2).ok());
  REQUIRE(g2.input_grad(0) != nullptr);
  CHECK(g2.input_grad(0)->f32 == dz.f32);
  CHECK(g2.added_ops().empty());
  // The signatures (S on each axis, B, P) as an f32 -> f32 cast, which moves
  // values unchanged: the layouts are the same for every dtype pair. P's
  // pieces are random addends of x: their sum is x within float rounding
  // (the checker's default bound).
  for (int parallel : {2, 3}) {
    const Status s = testing::check_sbp_signatures("cast", {x}, {{"dtype", std::string("f32")}}, parallel);
    CHECK_MESSAGE(s.ok(), s.to_string());
  }
}

TEST_CASE("transpose, slice, concat and slice_grad move 2-byte elements as they move 4-byte ones") {
  const Tensor x = Tensor::uniform({3, 4, 5}, 8);
  const Tensor xh = Tensor::halves(x.shape, DType::kBF16, x.f32);
  auto check_same = [&](const std::string& op, std::vector<Tensor> f32_in, std::vector<Tensor> h_in, const Attrs& attrs) {
    CAPTURE(op);
    auto a = testing::run_ok(op, std::move(f32_in), attrs);
    auto b = testing::run_ok(op, std::move(h_in), attrs);
    REQUIRE(b[0].dtype == DType::kBF16);
    CHECK(b[0].shape == a[0].shape);
    CHECK(b[0].h16 == Tensor::halves(a[0].shape, DType::kBF16, a[0].f32).h16);
  };
  // x's values are bf16's exactly after one rounding: compare with x rounded.
  const Tensor xr = Tensor::floats(x.shape, xh.as_floats());
  check_same("transpose", {xr}, {xh}, {{"perm", std::vector<int64_t>{2, 0, 1}}});
  check_same("transpose", {xr}, {xh}, {{"perm", std::vector<int64_t>{1, 0, 2}}});  // runs of the last axis
  check_same("slice", {xr}, {xh}, {{"starts", std::vector<int64_t>{1, 0, 2}}, {"ends", std::vector<int64_t>{3, 3, 4}}});
  check_same("concat", {xr, xr}, {xh, xh}, {{"axis", int64_t{1}}});
}

// The CPU widens 16-bit inputs to f32 exactly and multiplies as for f32
// inputs: the same bits as the f32 matmul of the rounded values.
TEST_CASE("matmul of bf16 or f16 inputs gives f32, the f32 product of the rounded values; its gradient casts dC") {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    CAPTURE(std::string(dtype_name(dtype)));
    const Tensor a32 = Tensor::uniform({2, 5, 7}, 31), b32 = Tensor::uniform({2, 7, 3}, 32);
    const Tensor a = Tensor::halves(a32.shape, dtype, a32.f32), b = Tensor::halves(b32.shape, dtype, b32.f32);
    const Tensor ar = Tensor::floats(a.shape, a.as_floats()), br = Tensor::floats(b.shape, b.as_floats());
    auto c = testing::run_ok("matmul", {a, b});
    REQUIRE(c[0].dtype == DType::kF32);
    CHECK(c[0].f32 == testing::run_ok("matmul", {ar, br})[0].f32);
    auto shared = testing::run_ok("matmul", {a, Tensor::halves({7, 3}, dtype, Tensor::uniform({7, 3}, 33).f32)});
    CHECK(shared[0].shape == Shape{2, 5, 3});
    // Mixed operands are refused.
    auto mixed = testing::run_op("matmul", {a, br});
    REQUIRE_FALSE(mixed.ok());
    CHECK(mixed.status().message().find("a and b must be both f32, both bf16 or both f16") != std::string::npos);
    // dA = cast(dC) B^T and dB = A^T cast(dC), f32.
    const Tensor dc = Tensor::uniform({2, 5, 3}, 34);
    testing::EagerGradBuilder g("matmul", {}, {a, b}, c, {dc}, {true, true});
    REQUIRE(find_op("matmul")->grad(g).ok());
    REQUIRE_MESSAGE(g.status().ok(), g.status().to_string());
    const Tensor dcr = Tensor::floats(dc.shape, Tensor::halves(dc.shape, dtype, dc.f32).as_floats());
    CHECK(g.input_grad(0)->dtype == DType::kF32);
    CHECK(g.input_grad(0)->f32 == testing::run_ok("matmul", {dcr, br}, {{"transpose_b", int64_t{1}}})[0].f32);
    CHECK(g.input_grad(1)->f32 == testing::run_ok("matmul", {ar, dcr}, {{"transpose_a", int64_t{1}}})[0].f32);
  }
}
