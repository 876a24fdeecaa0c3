// The CUDA kernels of a training step beyond the model's ops, against their
// CPU kernels (bounds as tests/kernels/cuda_kernels_test.cc says): gradient
// clipping, dropout, optimizer updates, loss scaling.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda_kernels.h"
#include "tests/kernels/cuda_compare.h"
#include "tests/kernels/grad_check.h"

namespace rill {

using namespace cuda_test;  // the harness: run_cuda, compare, check_close, gamma, ...
using testing::Tensor;

TEST_CASE("clipping's kernels and the folded matmul match the CPU") {
  Tensor g = Tensor::uniform({37, 11}, 81);
  compare("sum_squares", {g});
  // Many blocks (300,000 elements: 147 of them), summed twice to the same bits.
  const Tensor big = Tensor::uniform({600, 500}, 86);
  compare("sum_squares", {big});
  CHECK(run_cuda("sum_squares", {big}, {}).outputs[0].f32 == run_cuda("sum_squares", {big}, {}).outputs[0].f32);
  compare("add_n", {g, Tensor::uniform({37, 11}, 82), Tensor::uniform({37, 11}, 83)});
  compare("clip_factor", {Tensor::floats({}, {30.0f})}, {{"max_norm", 1.5}});
  Tensor a = Tensor::uniform({2, 9, 6}, 84), b = Tensor::uniform({2, 9, 7}, 85);
  Attrs fold{{"transpose_a", int64_t{1}}, {"fold_batch", int64_t{1}}};
  auto cpu = testing::run_op("matmul", {a, b}, fold);
  REQUIRE(cpu.ok());
  GpuRun gpu = run_cuda("matmul", {a, b}, fold);
  REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
  std::vector<double> bound((*cpu)[0].f32.size(), 2 * gamma(18) * 18);  // 18 products of values in [-1, 1)
  check_close(gpu.outputs[0].f32, (*cpu)[0].f32, &bound, "folded matmul");
}

TEST_CASE("dropout drops the CPU's elements: a whole tensor, and a piece of one in a later micro-batch") {
  // The mask is a hash of place, step and seed on both (dropout_math.h);
  // kept values are one float product: equal.
  const Attrs attrs{{"rate", 0.25}, {"seed", int64_t{5}}};
  testing::RunOptions whole;
  whole.step = 7;
  compare("dropout", {Tensor::uniform({6, 33, 10}, 86)}, attrs, whole);
  testing::RunOptions piece = whole;  // rows 2..3 and columns 4..9 of a [4, 3, 10] micro-batch, the second
  piece.micro = 1;
  piece.logical_inputs = {{4, 3, 10}};
  piece.input_offsets = {{2, 0, 4}};
  compare("dropout", {Tensor::uniform({2, 3, 6}, 87)}, attrs, piece);
}

TEST_CASE("optimizer updates match the CPU: variable and state") {
  Tensor w = Tensor::uniform({300}, 41);
  Tensor g = Tensor::uniform({300}, 42);
  compare("sgd_update", {w, g}, {{"lr", 0.1}, {"weight_decay", 0.01}});
  std::vector<Tensor> momentum = {Tensor::uniform({300}, 43)};
  testing::RunOptions with_momentum;
  with_momentum.state = &momentum;
  compare("momentum_update", {w, g}, {{"lr", 0.1}, {"momentum", 0.9}}, with_momentum);
  std::vector<Tensor> adam = {Tensor::uniform({300}, 44), Tensor::uniform({300}, 45, 0.0f, 1.0f)};
  testing::RunOptions with_adam;
  with_adam.state = &adam;
  with_adam.step = 6;
  compare("adam_update", {w, g}, {{"lr", 0.01}, {"weight_decay", 0.02}}, with_adam);
}

// Loss scaling (kernels/ops/loss_scale_math.h on both sides): its ops, and
// the updates reading a gate: 0 leaves variable and state as they were, t
// is Adam's t. A scale falling below 1 raises the context's flag, reported
// when the stream's work is seen complete, naming the step.
TEST_CASE("loss scaling's kernels and gated updates match the CPU; a scale below 1 is named with its step") {
  const Attrs attrs{{"scale", 65536.0}, {"window", int64_t{2}}};
  const Tensor state = Tensor::floats({3}, {-3, 1, 5});
  compare("loss_scale", {state}, attrs);
  testing::RunOptions at_step;
  at_step.step = 11;
  for (float total : {4.0f, std::numeric_limits<float>::infinity(), std::nanf("")})
    compare("loss_scale_check", {Tensor::floats({}, {total}), state}, attrs, at_step);
  for (float total : {4.0f, std::nanf("")}) compare("loss_scale_update", {state, Tensor::floats({}, {total})}, attrs);
  Tensor w = Tensor::uniform({300}, 51);
  Tensor g = Tensor::uniform({300}, 52);
  for (int32_t gate : {0, 1, 4}) {
    CAPTURE(gate);
    compare("sgd_update", {w, g, Tensor::ints({}, {gate})}, {{"lr", 0.1}});
    std::vector<Tensor> momentum = {Tensor::uniform({300}, 53)};
    testing::RunOptions with_momentum;
    with_momentum.state = &momentum;
    compare("momentum_update", {w, g, Tensor::ints({}, {gate})}, {{"lr", 0.1}}, with_momentum);
    std::vector<Tensor> adam = {Tensor::uniform({300}, 54), Tensor::uniform({300}, 55, 0.0f, 1.0f)};
    testing::RunOptions with_adam;
    with_adam.state = &adam;
    with_adam.step = 6;
    compare("adam_update", {w, g, Tensor::ints({}, {gate})}, {{"lr", 0.01}, {"weight_decay", 0.02}}, with_adam);
  }
  testing::RunOptions at_nine;
  at_nine.step = 9;
  GpuRun fell = run_cuda("loss_scale_update", {Tensor::zeros({3}), Tensor::floats({}, {std::nanf("")})},
                         {{"scale", 1.0}}, at_nine);
  REQUIRE_FALSE(fell.status.ok());
  CHECK(fell.status.message().find("the loss scale fell below 1 at step 9") != std::string::npos);
  CHECK(context().synchronize("after").ok());  // the flag was cleared
}

// cast converts with base/half.h's code on both sides, and the layout ops
// move 2-byte elements: the CPU's bits exactly, NaN, infinities, overflow
// and subnormals included.
}  // namespace rill

namespace rill {

using namespace cuda_test;
using testing::Tensor;

// The mixture of experts' kernels (kernels/ops/moe.cu): the CPU's
// arithmetic in the CPU's order, so routes and slots exactly and values
// within the default bound; a slot out of range raises the bad-index flag.
TEST_CASE("the mixture of experts' kernels match the CPU") {
  const int64_t groups = 3, s = 8, e = 4, d = 5, capacity = 3;
  Tensor logits = Tensor::uniform({groups, s, e}, 91, -2.0f, 2.0f);
  for (int64_t k : {1, 2}) {
    CAPTURE(k);
    const Attrs route{{"k", k}, {"capacity", capacity}};
    compare("moe_route", {logits}, route);
    auto routed = testing::run_op("moe_route", {logits}, route);
    REQUIRE(routed.ok());
    const Tensor& gates = (*routed)[0];
    const Tensor& slots = (*routed)[1];
    compare("moe_route_grad", {logits, Tensor::uniform({groups, s, k}, 92)}, route);
    const Tensor x = Tensor::uniform({groups, s, d}, 93), y = Tensor::uniform({e, groups, capacity, d}, 94);
    compare("moe_dispatch", {x, slots, gates}, {{"experts", e}, {"capacity", capacity}});
    compare("moe_dispatch", {x, slots}, {{"experts", e}, {"capacity", capacity}});
    compare("moe_combine", {y, slots, gates});
    compare("moe_gate_grad", {y, slots, x});
  }
  for (const char* loss : {"moe_balance_loss", "moe_z_loss"}) {
    compare(loss, {logits});
    compare(std::string(loss) + "_grad", {logits, Tensor::uniform({groups}, 96)});
  }
  GpuRun bad = run_cuda("moe_combine", {Tensor::uniform({2, 1, 2, 3}, 95), Tensor::ints({1, 2, 1}, {0, 9})}, {});
  CHECK_FALSE(bad.status.ok());
}

}  // namespace rill
