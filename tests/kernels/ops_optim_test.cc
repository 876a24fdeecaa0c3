// Optimizer update ops against reference computations of PyTorch's formulas
// (torch.optim.SGD with and without momentum, torch.optim.Adam).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/op.h"
#include "kernels/ops/cpu_clones.h"
#include "kernels/ops/lr_schedule.h"
#include "tests/kernels/grad_check.h"

namespace rill {
namespace {

using testing::Tensor;
using Ints = std::vector<int64_t>;

// The gradient at step k: varied in sign and size across elements and steps.
std::vector<float> gradient_at(int step, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(std::sin(1.7 * i + 0.9 * step) * (1.0 + 0.3 * i));
  return g;
}

const std::vector<float> kStart = {0.5f, -1.25f, 2.0f, 0.0f, -0.75f, 1.5f};

// Runs `steps` updates of `type` from kStart and returns the variable after each.
std::vector<std::vector<float>> run_steps(const std::string& type, const Attrs& attrs, int steps,
                                          Shape shape = {2, 3}) {
  const OpDef* def = find_op(type);
  REQUIRE(def != nullptr);
  std::vector<Tensor> state(def->num_state, Tensor::zeros(shape));
  std::vector<Tensor> io = {Tensor::floats(shape, kStart), Tensor::zeros(shape)};
  std::vector<std::vector<float>> history;
  for (int k = 0; k < steps; ++k) {
    io[1].f32 = gradient_at(k, kStart.size());
    testing::RunOptions options;
    options.step = k;
    options.state = &state;
    auto out = testing::run_kernel(*def, io, attrs, options);
    REQUIRE_MESSAGE(out.ok(), out.status().to_string());
    CHECK(out->empty());
    history.push_back(io[0].f32);
  }
  return history;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, double tolerance = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(static_cast<double>(got[i]) - want[i]) <= tolerance);
  }
}

Status infer_status(const std::string& type, std::vector<TensorMeta> inputs, const Attrs& attrs) {
  std::vector<TensorMeta> outputs;
  return infer_op(*find_op(type), attrs, inputs, &outputs);
}

bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

}  // namespace

TEST_CASE("sgd_update: w -= lr * (g + weight_decay * w)") {
  // Hand-checked: 0.5 - 0.1 * (sin(0) * 1 + 0.01 * 0.5) = 0.4995.
  Attrs attrs{{"lr", 0.1}, {"weight_decay", 0.01}};
  auto history = run_steps("sgd_update", attrs, 3);
  CHECK(std::fabs(history[0][0] - 0.4995) < 1e-7);
  std::vector<float> w = kStart;
  for (int k = 0; k < 3; ++k) {
    std::vector<float> g = gradient_at(k, w.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(w[i] - 0.1 * (g[i] + 0.01 * w[i]));
    check_close(history[k], w);
  }
}

TEST_CASE("momentum_update follows torch.optim.SGD with momentum") {
  Attrs attrs{{"lr", 0.05}, {"momentum", 0.9}, {"weight_decay", 0.001}};
  auto history = run_steps("momentum_update", attrs, 5);
  std::vector<float> w = kStart, buffer(w.size());
  for (int k = 0; k < 5; ++k) {
    std::vector<float> g = gradient_at(k, w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      double d = g[i] + 0.001 * w[i];
      // torch: the first step clones d_p into the buffer; later steps buf = momentum * buf + d_p.
      buffer[i] = static_cast<float>(k == 0 ? d : 0.9 * buffer[i] + d);
      w[i] = static_cast<float>(w[i] - 0.05 * buffer[i]);
    }
    check_close(history[k], w);
  }
  // Hand-checked two steps of a constant gradient 1 from w = 1, lr 0.1:
  // v = 1, w = 0.9; then v = 1.9, w = 0.71.
  const OpDef& def = *find_op("momentum_update");
  std::vector<Tensor> state = {Tensor::zeros({1})};
  std::vector<Tensor> io = {Tensor::floats({1}, {1.0f}), Tensor::floats({1}, {1.0f})};
  testing::RunOptions options;
  options.state = &state;
  Attrs plain{{"lr", 0.1}, {"momentum", 0.9}};
  REQUIRE(testing::run_kernel(def, io, plain, options).ok());
  CHECK(std::fabs(io[0].f32[0] - 0.9) < 1e-6);
  options.step = 1;
  REQUIRE(testing::run_kernel(def, io, plain, options).ok());
  CHECK(std::fabs(io[0].f32[0] - 0.71) < 1e-6);
  CHECK(std::fabs(state[0].f32[0] - 1.9) < 1e-6);
}

TEST_CASE("adam_update follows torch.optim.Adam with bias correction") {
  double lr = 0.01, beta1 = 0.8, beta2 = 0.95, eps = 1e-6, decay = 0.02;
  Attrs attrs{{"lr", lr}, {"beta1", beta1}, {"beta2", beta2}, {"epsilon", eps}, {"weight_decay", decay}};
  auto history = run_steps("adam_update", attrs, 6);
  std::vector<float> w = kStart, m(w.size()), v(w.size());
  for (int k = 0; k < 6; ++k) {
    std::vector<float> g = gradient_at(k, w.size());
    int t = k + 1;
    for (size_t i = 0; i < w.size(); ++i) {
      double d = g[i] + decay * w[i];
      m[i] = static_cast<float>(m[i] + (1 - beta1) * (d - m[i]));  // exp_avg.lerp_(grad, 1 - beta1)
      v[i] = static_cast<float>(v[i] * beta2 + (1 - beta2) * d * d);
      double bias_correction1 = 1 - std::pow(beta1, t), bias_correction2 = 1 - std::pow(beta2, t);
      double step_size = lr / bias_correction1;
      double denom = std::sqrt(static_cast<double>(v[i])) / std::sqrt(bias_correction2) + eps;
      w[i] = static_cast<float>(w[i] - step_size * m[i] / denom);
    }
    check_close(history[k], w);
  }
}

// AdamW as torch.optim.AdamW: param.mul_(1 - lr * weight_decay), then the
// Adam step on the untouched gradient; here under a warmup-then-cosine
// schedule, the rate of step k being lr_at(k) (kernels/ops/lr_schedule.h).
TEST_CASE("adam_update with decoupled decay follows torch.optim.AdamW under a scheduled rate") {
  const double lr = 0.05, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, decay = 0.1, min_lr = 0.005;
  const Attrs attrs{{"lr", lr},          {"beta1", beta1},         {"beta2", beta2},
                    {"epsilon", eps},    {"weight_decay", decay},  {"decoupled", int64_t{1}},
                    {"warmup_steps", int64_t{2}}, {"decay_steps", int64_t{5}}, {"min_lr", min_lr}};
  auto history = run_steps("adam_update", attrs, 7);
  const LrSchedule schedule{lr, 2, 5, min_lr};
  // The schedule itself: warmup 1/2, 2/2, then cosine over steps 2..5, floor after.
  const double want_lr[] = {lr / 2, lr, lr, min_lr + 0.5 * (1 + std::cos(M_PI / 3)) * (lr - min_lr),
                            min_lr + 0.5 * (1 + std::cos(2 * M_PI / 3)) * (lr - min_lr), min_lr, min_lr};
  std::vector<float> w = kStart, m(w.size()), v(w.size());
  for (int k = 0; k < 7; ++k) {
    CHECK(lr_at(schedule, k) == doctest::Approx(want_lr[k]).epsilon(1e-12));
    const double lr_k = want_lr[k];
    std::vector<float> g = gradient_at(k, w.size());
    const int t = k + 1;
    for (size_t i = 0; i < w.size(); ++i) {
      const double shrunk = w[i] * (1 - lr_k * decay);
      m[i] = static_cast<float>(beta1 * m[i] + (1 - beta1) * g[i]);
      v[i] = static_cast<float>(beta2 * v[i] + (1 - beta2) * double(g[i]) * g[i]);
      const double denom = std::sqrt(double(v[i])) / std::sqrt(1 - std::pow(beta2, t)) + eps;
      w[i] = static_cast<float>(shrunk - lr_k / (1 - std::pow(beta1, t)) * m[i] / denom);
    }
    check_close(history[k], w);
  }
  CHECK_FALSE(testing::run_op("adam_update", {Tensor::zeros({2}), Tensor::zeros({2})},
                              {{"warmup_steps", int64_t{-1}}})
                  .ok());
}

TEST_CASE("adam's first step moves each weight by lr against the gradient's sign") {
  // With m_hat = g and v_hat = g^2, the first update is lr * g / (|g| + eps).
  auto history = run_steps("adam_update", {{"lr", 0.001}}, 1);
  std::vector<float> g = gradient_at(0, kStart.size());
  for (size_t i = 0; i < kStart.size(); ++i) {
    CAPTURE(i);
    double sign = g[i] > 0 ? 1 : (g[i] < 0 ? -1 : 0);
    CHECK(std::fabs(history[0][i] - (kStart[i] - 0.001 * sign)) < 1e-6);
  }
}

TEST_CASE("updates of a split variable's pieces equal the update of the whole") {
  Attrs attrs{{"lr", 0.01}, {"weight_decay", 0.1}};
  const OpDef& def = *find_op("adam_update");
  std::vector<Tensor> whole_state(2, Tensor::zeros({6}));
  std::vector<Tensor> whole = {Tensor::floats({6}, kStart), Tensor::floats({6}, gradient_at(0, 6))};
  testing::RunOptions options;
  options.state = &whole_state;
  REQUIRE(testing::run_kernel(def, whole, attrs, options).ok());
  std::vector<float> joined;
  for (auto [begin, end] : {std::pair{0, 4}, std::pair{4, 6}}) {
    Shape piece{end - begin};
    std::vector<Tensor> state(2, Tensor::zeros(piece));
    std::vector<float> g = gradient_at(0, 6);
    std::vector<Tensor> io = {Tensor::floats(piece, std::vector<float>(kStart.begin() + begin, kStart.begin() + end)),
                              Tensor::floats(piece, std::vector<float>(g.begin() + begin, g.begin() + end))};
    options.state = &state;
    REQUIRE(testing::run_kernel(def, io, attrs, options).ok());
    joined.insert(joined.end(), io[0].f32.begin(), io[0].f32.end());
  }
  CHECK(joined == whole[0].f32);
}

TEST_CASE("update SBP: variable and gradient share B or one split") {
  auto sigs = find_op("sgd_update")->sbp({}, std::vector<TensorMeta>{{{2, 3}}, {{2, 3}}});
  std::vector<SbpSignature> want = {{{Sbp::broadcast(), Sbp::broadcast()}, {}},
                                    {{Sbp::split(0), Sbp::split(0)}, {}},
                                    {{Sbp::split(1), Sbp::split(1)}, {}}};
  CHECK(sigs == want);
  for (const char* type : {"sgd_update", "momentum_update", "adam_update"}) {
    const OpDef* def = find_op(type);
    REQUIRE_MESSAGE(def != nullptr, type);
    CHECK(def->role == OpRole::kUpdate);
    CHECK(def->num_inputs == -1);  // the variable, its gradient and a gate under loss scaling
    CHECK(def->num_outputs == 0);
    CHECK((def->grad == nullptr));
  }
  CHECK(find_op("sgd_update")->num_state == 0);
  CHECK(find_op("momentum_update")->num_state == 1);
  CHECK(find_op("adam_update")->num_state == 2);
}

TEST_CASE("update errors name the shapes and the attrs") {
  Status s = infer_status("adam_update", {{{2, 3}}, {{3, 2}}}, {});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s, "[2, 3]"));
  CHECK(contains(s, "[3, 2]"));
  CHECK(contains(s, "adam_update"));
  CHECK(infer_status("adam_update", {{{2, 3}}, {{2, 3}}}, {}).ok());
  CHECK(contains(infer_status("sgd_update", {{{2}}, {{2}}}, {{"lr", -0.1}}), "'lr' = -0.1"));
  CHECK(contains(infer_status("momentum_update", {{{2}}, {{2}}}, {{"momentum", 1.5}}), "'momentum' = 1.5"));
  CHECK(contains(infer_status("adam_update", {{{2}}, {{2}}}, {{"beta1", 1.0}}), "'beta1' = 1"));
  CHECK(contains(infer_status("adam_update", {{{2}}, {{2}}}, {{"epsilon", std::string("small")}}), "'epsilon'"));
  CHECK(contains(infer_status("sgd_update", {{{2}, DType::kI32}, {{2}, DType::kI32}}, {}), "f32"));
  CHECK(contains(infer_status("sgd_update", {{{2}}}, {}), "got 1 inputs"));
  CHECK(infer_status("sgd_update", {{{2}}, {{2}}, {{}, DType::kI32}}, {}).ok());
  CHECK(contains(infer_status("sgd_update", {{{2}}, {{2}}, {{}, DType::kF32}}, {}), "gate must be an i32 scalar"));
}

// Loss scaling's gate (compiler/gradient_norm.h): 0 skips the update, so
// the variable and its state stay bitwise as they were; t > 0 is the
// update's number, Adam's t, so t = 1 at step 5 (two steps skipped before,
// say) is the first step's update, with the step's rate (constant here).
TEST_CASE("a gate of 0 skips any update; a gate of t is Adam's t") {
  for (const char* type : {"sgd_update", "momentum_update", "adam_update"}) {
    CAPTURE(std::string(type));
    const OpDef& def = *find_op(type);
    std::vector<Tensor> state(def.num_state, Tensor::uniform({2, 3}, 3, 0.0f, 1.0f));
    const std::vector<Tensor> state_before = state;
    std::vector<Tensor> io = {Tensor::floats({2, 3}, kStart), Tensor::floats({2, 3}, gradient_at(0, 6)),
                              Tensor::ints({}, {0})};
    testing::RunOptions options;
    options.step = 4;
    options.state = &state;
    REQUIRE(testing::run_kernel(def, io, {{"lr", 0.1}}, options).ok());
    CHECK(io[0].f32 == kStart);
    for (size_t k = 0; k < state.size(); ++k) CHECK(state[k].f32 == state_before[k].f32);
  }
  const OpDef& adam = *find_op("adam_update");
  const Attrs attrs{{"lr", 0.01}, {"beta1", 0.8}, {"beta2", 0.95}};
  auto first = run_steps("adam_update", attrs, 1);
  std::vector<Tensor> state(2, Tensor::zeros({2, 3}));
  std::vector<Tensor> io = {Tensor::floats({2, 3}, kStart), Tensor::floats({2, 3}, gradient_at(0, 6)),
                            Tensor::ints({}, {1})};
  testing::RunOptions options;
  options.step = 5;
  options.state = &state;
  REQUIRE(testing::run_kernel(adam, io, attrs, options).ok());
  CHECK(io[0].f32 == first[0]);
}

// Adam's loop runs in the copy for this CPU (kernels/ops/cpu_clones.h):
// every copy must give the baseline's bits, step after step (the loop is
// elementwise double arithmetic in source order, and sqrt and division are
// correctly rounded in every instruction set). 1031 elements: whole vectors
// and a tail; Adam and AdamW with weight decay.
TEST_CASE("every copy of Adam's loop gives the baseline's bits") {
  const OpDef& adam = *find_op("adam_update");
  const Shape shape = {1031};
  auto run = [&](const Attrs& attrs) {
    std::vector<Tensor> state(2, Tensor::zeros(shape));
    std::vector<Tensor> io = {Tensor::uniform(shape, 7, -2.0f, 2.0f), Tensor::zeros(shape)};
    for (int k = 0; k < 4; ++k) {
      io[1] = Tensor::uniform(shape, static_cast<uint64_t>(20 + k), -3.0f, 3.0f);
      testing::RunOptions options;
      options.step = k;
      options.state = &state;
      REQUIRE(testing::run_kernel(adam, io, attrs, options).ok());
    }
    return std::vector<std::vector<float>>{io[0].f32, state[0].f32, state[1].f32};
  };
  int copies = 0;
  for (const Attrs& attrs : {Attrs{{"lr", 0.01}, {"weight_decay", 0.1}},
                             Attrs{{"lr", 0.01}, {"weight_decay", 0.1}, {"decoupled", int64_t{1}}}}) {
    const auto baseline = [&] {
      const cpu_clones::ScopedIsaForTesting use(cpu_clones::Isa::kBaseline);
      return run(attrs);
    }();
    for (const cpu_clones::Isa isa : cpu_clones::kIsas) {
      if (!cpu_clones::cpu_runs(isa)) continue;
      CAPTURE(std::string(cpu_clones::isa_name(isa)));
      const cpu_clones::ScopedIsaForTesting use(isa);
      const auto got = run(attrs);
      for (size_t t = 0; t < got.size(); ++t) {
        CAPTURE(t);
        CHECK(std::memcmp(got[t].data(), baseline[t].data(), got[t].size() * sizeof(float)) == 0);
      }
      ++copies;
    }
  }
  CHECK(copies >= 2);
}

// The loss_scale ops (kernels/ops/loss_scale.cc): the scale is 2^(e0 +
// shift); a finite total counts a good step and after `window` of them
// doubles the scale (never past 2^127); a non-finite one halves it and
// counts a skipped step; the gate is step + 1 - skipped, 0 when skipped.
TEST_CASE("loss scaling's ops: the scale, the check of a step, the state's update") {
  const Attrs attrs{{"scale", 65536.0}, {"window", int64_t{2}}};
  Tensor state = Tensor::zeros({3});
  auto run = [&](const char* type, std::vector<Tensor> inputs, int64_t step) {
    testing::RunOptions options;
    options.step = step;
    auto out = testing::run_kernel(*find_op(type), inputs, attrs, options);
    REQUIRE_MESSAGE(out.ok(), out.status().to_string());
    if (std::string(type) == "loss_scale_update") state = inputs[0];
    return *out;
  };
  CHECK(run("loss_scale", {state}, 0)[0].f32[0] == 65536.0f);
  auto check = run("loss_scale_check", {Tensor::floats({}, {4.0f}), state}, 7);
  CHECK(check[0].f32[0] == std::ldexp(1.0f, -16));
  CHECK(check[1].f32[0] == std::ldexp(4.0f, -32));
  CHECK(check[2].i32[0] == 8);
  CHECK(check[3].f32[0] == 0.0f);
  const float inf = std::numeric_limits<float>::infinity();
  check = run("loss_scale_check", {Tensor::floats({}, {inf}), state}, 7);
  CHECK(check[2].i32[0] == 0);
  CHECK(check[3].f32[0] == 1.0f);
  run("loss_scale_update", {state, Tensor::floats({}, {4.0f})}, 0);
  CHECK(state.f32 == std::vector<float>{0, 1, 0});
  run("loss_scale_update", {state, Tensor::floats({}, {4.0f})}, 1);  // the window: doubled
  CHECK(state.f32 == std::vector<float>{1, 0, 0});
  CHECK(run("loss_scale", {state}, 2)[0].f32[0] == 131072.0f);
  run("loss_scale_update", {state, Tensor::floats({}, {std::nanf("")})}, 2);  // overflow: halved, counted
  CHECK(state.f32 == std::vector<float>{0, 0, 1});
  check = run("loss_scale_check", {Tensor::floats({}, {1.0f}), state}, 3);
  CHECK(check[2].i32[0] == 3);  // steps 0, 1 and 3 applied
  // Down from 1: the update fails, naming the step.
  Tensor one = Tensor::zeros({3});
  std::vector<Tensor> inputs = {one, Tensor::floats({}, {inf})};
  testing::RunOptions options;
  options.step = 9;
  Status fell = testing::run_kernel(*find_op("loss_scale_update"), inputs, {{"scale", 1.0}}, options).status();
  CHECK(contains(fell, "the loss scale fell below 1 at step 9"));
  // Up to 2^127 and no further.
  inputs = {Tensor::zeros({3}), Tensor::floats({}, {1.0f})};
  REQUIRE(testing::run_kernel(*find_op("loss_scale_update"), inputs,
                              {{"scale", std::ldexp(1.0, 127)}, {"window", int64_t{1}}}, {})
              .ok());
  CHECK(inputs[0].f32[0] == 0.0f);
  // Attrs and shapes are checked.
  CHECK(contains(infer_status("loss_scale", {{{3}}}, {{"scale", 3.0}}), "power of two"));
  CHECK(contains(infer_status("loss_scale", {{{3}}}, {{"scale", 0.5}}), "power of two"));
  CHECK(contains(infer_status("loss_scale", {{{2}}}, {{"scale", 2.0}}), "f32 [3]"));
  CHECK(contains(infer_status("loss_scale_update", {{{3}}, {{}}}, {{"scale", 2.0}, {"window", int64_t{0}}}),
                 "'window'"));
}

}  // namespace rill
