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

// Ring attention's steps on a GPU (kernels/ops/attention_cuda.cc): every
// pair of 3 pieces of a causal sequence, queries of piece i over keys of
// piece j at their places (the diagonal masked, earlier pieces whole,
// later ones seeing nothing), folded into a running result, against the
// CPU's steps within attention's 2e-4 (tests/kernels/cuda_kernels_test.cc:
// products as three TF32 ones); a block that cuts across the mask is
// refused by name.
TEST_CASE("ring attention's steps match the CPU on every pair of pieces of a causal sequence") {
  const Shape whole = {1, 2, 96, 32}, piece = {1, 2, 32, 32}, rows = {1, 2, 32};
  const Attrs causal{{"causal", int64_t{1}}};
  auto placed = [&](int64_t q_at, int64_t k_at, int extra) {
    testing::RunOptions o;
    o.logical_inputs = {whole, whole, whole};
    o.input_offsets = {{0, 0, q_at, 0}, {0, 0, k_at, 0}, {0, 0, k_at, 0}};
    const Shape lse_whole = {1, 2, 96};
    for (int e = 0; e < extra; ++e) {  // y, lse, dy, dq: the queries' rows
      o.logical_inputs.push_back(e == 1 ? lse_whole : whole);
      o.input_offsets.push_back(e == 1 ? Shape{0, 0, q_at} : Shape{0, 0, q_at, 0});
    }
    return o;
  };
  std::vector<double> bound;
  auto bound_for = [&bound](const std::vector<float>& cpu) {
    bound.clear();
    for (float x : cpu) bound.push_back(std::isinf(x) ? 0.0 : 2e-4 * std::max(1.0, std::abs(static_cast<double>(x))));
    return &bound;
  };
  const Tensor y = Tensor::uniform(piece, 71), lse = Tensor::uniform(rows, 72), dy = Tensor::uniform(piece, 73);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      const Tensor q = Tensor::uniform(piece, 74 + i), k = Tensor::uniform(piece, 77 + j), v = Tensor::uniform(piece, 80 + j);
      const std::vector<Tensor> step_in = {q, k, v, y, lse};
      auto cpu = testing::run_op("attention_step", step_in, causal, placed(32 * i, 32 * j, 2));
      REQUIRE_MESSAGE(cpu.ok(), cpu.status().to_string());
      GpuRun gpu = run_cuda("attention_step", step_in, causal, placed(32 * i, 32 * j, 2));
      REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
      for (size_t o = 0; o < 2; ++o)
        check_close(gpu.outputs[o].f32, (*cpu)[o].f32, bound_for((*cpu)[o].f32), "attention_step output " + std::to_string(o));
      const std::vector<Tensor> grad_in = {q, k, v, (*cpu)[0], (*cpu)[1], dy, Tensor::uniform(piece, 83)};
      auto cpu_grad = testing::run_op("attention_grad_step", grad_in, causal, placed(32 * i, 32 * j, 4));
      REQUIRE_MESSAGE(cpu_grad.ok(), cpu_grad.status().to_string());
      GpuRun gpu_grad = run_cuda("attention_grad_step", grad_in, causal, placed(32 * i, 32 * j, 4));
      REQUIRE_MESSAGE(gpu_grad.status.ok(), gpu_grad.status.to_string());
      for (size_t o = 0; o < 3; ++o)
        check_close(gpu_grad.outputs[o].f32, (*cpu_grad)[o].f32, bound_for((*cpu_grad)[o].f32),
                    "attention_grad_step output " + std::to_string(o));
    }
  const Tensor q = Tensor::uniform(piece, 84);
  GpuRun across = run_cuda("attention", {q, q, q}, causal, placed(16, 0, 0));
  REQUIRE_FALSE(across.status.ok());
  CHECK(across.status.message().find("cuts across the block") != std::string::npos);
}

}  // namespace rill
