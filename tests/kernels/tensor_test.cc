#include <doctest/doctest.h>

#include "kernels/tensor.h"

namespace rill {

TEST_CASE("physical_shape splits balanced pieces that cover the axis") {
  Shape logical{5, 3};
  CHECK(physical_shape(logical, Sbp::split(0), 2, 0) == Shape{3, 3});
  CHECK(physical_shape(logical, Sbp::split(0), 2, 1) == Shape{2, 3});
  CHECK(physical_shape(logical, Sbp::split(1), 3, 2) == Shape{5, 1});
  CHECK(physical_shape(logical, Sbp::broadcast(), 2, 1) == logical);
  CHECK(split_offset(5, 2, 1) == 3);
}

TEST_CASE("sbp and dtype parse what they print") {
  for (Sbp sbp : {Sbp::split(0), Sbp::split(1), Sbp::broadcast(), Sbp::partial_sum()}) {
    Sbp parsed;
    REQUIRE(parse_sbp(sbp.to_string(), &parsed));
    CHECK(parsed == sbp);
  }
  Sbp bad;
  CHECK_FALSE(parse_sbp("S(x)", &bad));
  DType dtype;
  CHECK(parse_dtype("float32", &dtype));
  CHECK(dtype == DType::kF32);
  CHECK_FALSE(parse_dtype("f64", &dtype));
}

}  // namespace rill
