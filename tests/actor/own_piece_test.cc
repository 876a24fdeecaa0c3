// OwnPieceBody on host memory: each device's conversion of its own piece,
// element by element against the logical tensor (copies and zeros only).
#include <doctest/doctest.h>

#include <vector>

#include "actor/own_piece_body.h"

namespace rill {
namespace {

// One act from `in` (covering `from` of a [2, 5] tensor) into `out`.
std::vector<float> act(const Region& from, const Region& to, bool zero, bool copy, const std::vector<float>& in) {
  OwnPieceBody body(nullptr, from, to, zero, copy, DType::kF32, "own");
  std::vector<float> source = in, out(static_cast<size_t>(to.size()), -1.0f);
  const TensorView input{source.data(), from.extent, DType::kF32}, output{out.data(), to.extent, DType::kF32};
  const TensorView* inputs[] = {&input};
  const TensorView* outputs[] = {&output};
  REQUIRE(body.act(ActIo{0, inputs, outputs}).ok());
  return out;
}

TEST_CASE("a device's own piece: B -> S(1) its columns, S(1) -> P zeros around them, B -> P zeros off the holder") {
  const Region whole{{0, 0}, {2, 5}}, cols{{0, 3}, {2, 2}};
  const std::vector<float> logical{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(act(whole, cols, false, true, logical) == std::vector<float>{3, 4, 8, 9});
  CHECK(act(cols, whole, true, true, {3, 4, 8, 9}) == std::vector<float>{0, 0, 0, 3, 4, 0, 0, 0, 8, 9});
  CHECK(act(whole, whole, true, false, logical) == std::vector<float>(10, 0.0f));
  CHECK(act(whole, whole, false, true, logical) == logical);
  // A slot that is not the piece's size is refused.
  OwnPieceBody body(nullptr, whole, cols, false, true, DType::kF32, "own");
  std::vector<float> in(logical), out(3);
  const TensorView input{in.data(), {2, 5}, DType::kF32}, output{out.data(), {3}, DType::kF32};
  const TensorView* inputs[] = {&input};
  const TensorView* outputs[] = {&output};
  CHECK(body.act(ActIo{0, inputs, outputs}).code() == Code::kInternal);
}

}  // namespace
}  // namespace rill
