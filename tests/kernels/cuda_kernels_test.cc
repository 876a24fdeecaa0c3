// Every CUDA kernel against its CPU kernel on the same inputs, on a real GPU.
// Without one (CI has none) the suite reports itself skipped (exit 77), with
// the reason, instead of passing.
//
// Tolerances, and why they hold on any CPU and GPU:
// - Elementwise ops, losses and optimizer updates evaluate the same formula
//   per element in at most a dozen float operations; CUDA's expf, logf, erff
//   and tanhf are within 2 ulp and glibc's within 1 (CUDA Programming Guide,
//   "Mathematical Functions"; glibc manual, "Known Maximum Errors"), so the
//   results differ by a few dozen ulp of the largest intermediate at most:
//   |gpu - cpu| <= 1e-5 * max(1, |cpu|) (inputs are O(1)).
// - matmul and the reductions sum n products in an order the library picks:
//   each side is within gamma_n * sum|terms| of the exact sum (Higham 3.1), so
//   |gpu - cpu| <= 2 gamma_n * sum|terms|, computed here per element.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cublas_v2.h>

#include <algorithm>
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

// copy_peer: bytes from one GPU's memory into another's, peer to peer (the
// d2d copies between pipeline stages on two GPUs of a node); from the same
// GPU where the machine has one. Exact: a copy changes no bit.
TEST_CASE("copy_peer copies a GPU's bytes exactly, from the same GPU and from another where there is one") {
  const int devices = cuda_device_count();
  std::vector<float> values(1 << 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const size_t bytes = values.size() * sizeof(float);
  for (int src_device = 0; src_device < std::min(devices, 2); ++src_device) {
    CAPTURE(src_device);
    auto source = CudaContext::create(src_device);
    REQUIRE_MESSAGE(source.ok(), source.status().to_string());
    CudaContext& from = **source;
    auto src = from.allocate(bytes, "copy_peer source");
    REQUIRE(src.ok());
    REQUIRE(from.copy(*src, values.data(), bytes, CopyKind::kHostToDevice, "copy_peer source").ok());
    REQUIRE(from.synchronize("copy_peer source").ok());
    CudaContext& to = context();  // cuda:0
    REQUIRE(to.activate("copy_peer").ok());
    auto dst = to.allocate(bytes, "copy_peer target");
    REQUIRE(dst.ok());
    auto status = to.copy_peer(*dst, *src, src_device, bytes, nullptr, "copy_peer");
    REQUIRE_MESSAGE(status.ok(), status.to_string());
    std::vector<float> back(values.size());
    REQUIRE(to.copy(back.data(), *dst, bytes, CopyKind::kDeviceToHost, "copy_peer back").ok());
    REQUIRE(to.synchronize("copy_peer back").ok());
    CHECK(back == values);
    to.release(*dst);
    from.release(*src);
  }
  if (devices < 2) MESSAGE("from another GPU not run: this machine has " << devices);
}

TEST_CASE("matmul: cuBLAS against OpenBLAS within 2 gamma_K sum|a b|, every transpose") {
  const int64_t m = 37, k = 129, n = 53;  // not multiples of any tile
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta);
      CAPTURE(tb);
      Tensor a = Tensor::uniform(ta ? Shape{k, m} : Shape{m, k}, 1 + ta);
      Tensor b = Tensor::uniform(tb ? Shape{n, k} : Shape{k, n}, 3 + tb);
      Attrs attrs{{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}};
      auto cpu = testing::run_op("matmul", {a, b}, attrs);
      REQUIRE(cpu.ok());
      GpuRun gpu = run_cuda("matmul", {a, b}, attrs);
      REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
      std::vector<double> bound(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double abs_sum = 0;
          for (int64_t p = 0; p < k; ++p)
            abs_sum += std::abs(a.f32[ta ? p * m + i : i * k + p]) * std::abs(b.f32[tb ? j * k + p : p * n + j]);
          bound[i * n + j] = 2 * gamma(k) * abs_sum;
        }
      check_close(gpu.outputs[0].f32, (*cpu)[0].f32, &bound, "matmul");
    }
}

// bf16 and f16 inputs: both sides multiply the same 16-bit values, whose
// products are exact in float (8 or 11 significant bits each), and sum them
// in float in their own orders (cuBLAS on tensor cores): the f32 bound.
TEST_CASE("matmul of bf16 and f16 inputs: cuBLAS on tensor cores against the CPU within 2 gamma_K sum|a b|") {
  const int64_t m = 37, k = 129, n = 53;
  for (DType dtype : {DType::kBF16, DType::kF16})
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(tb);
      const Tensor a = Tensor::halves({2, m, k}, dtype, Tensor::uniform({2, m, k}, 21).f32);
      const Tensor b = Tensor::halves(tb ? Shape{2, n, k} : Shape{2, k, n}, dtype, Tensor::uniform({2, k, n}, 22).f32);
      Attrs attrs{{"transpose_b", int64_t{tb}}};
      auto cpu = testing::run_op("matmul", {a, b}, attrs);
      REQUIRE(cpu.ok());
      GpuRun gpu = run_cuda("matmul", {a, b}, attrs);
      REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
      REQUIRE(gpu.outputs[0].dtype == DType::kF32);
      const std::vector<float> av = a.as_floats(), bv = b.as_floats();
      std::vector<double> bound(2 * m * n);
      for (int64_t q = 0; q < 2; ++q)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double abs_sum = 0;
            for (int64_t p = 0; p < k; ++p)
              abs_sum += std::abs(av[(q * m + i) * k + p]) * std::abs(bv[q * k * n + (tb ? j * k + p : p * n + j)]);
            bound[(q * m + i) * n + j] = 2 * gamma(k) * abs_sum;
          }
      check_close(gpu.outputs[0].f32, (*cpu)[0].f32, &bound, "matmul");
    }
  // They ran in default math (kernels/ops/cuda_ops.cc), and the handle is
  // back in the pedantic math its f32 products use without allow_tf32.
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
  REQUIRE(cublasGetMathMode(static_cast<cublasHandle_t>(context().cublas()), &mode) == CUBLAS_STATUS_SUCCESS);
  CHECK(mode == CUBLAS_PEDANTIC_MATH);
}

TEST_CASE("elementwise ops, activations and their gradients match the CPU") {
  Tensor x = Tensor::uniform({7, 33}, 11, -3.0f, 3.0f);
  Tensor y = Tensor::uniform({7, 33}, 12, -3.0f, 3.0f);
  Tensor scalar = Tensor::floats({}, {0.75f});
  for (const char* op : {"relu", "gelu", "tanh", "sigmoid", "ones_like", "identity"}) compare(op, {x});
  for (const char* op : {"relu_grad", "gelu_grad", "tanh_grad", "sigmoid_grad"}) compare(op, {x, y});
  for (const char* op : {"add", "sub", "mul"}) {
    compare(op, {x, y});
    compare(op, {x, scalar});
  }
  compare("scale", {x}, {{"scale", 2.5}});
  compare("reshape", {x}, {{"shape", std::vector<int64_t>{33, 7}}});
  compare("bias_add", {x, Tensor::uniform({33}, 13)});
  compare("bias_add", {Tensor::uniform({4, 5, 6}, 14), Tensor::uniform({5}, 15)}, {{"axis", int64_t{1}}});
}

TEST_CASE("softmax cross-entropy, its gradient and accuracy match the CPU; a bad label is an error naming its row") {
  Tensor logits = Tensor::uniform({64, 10}, 21, -4.0f, 4.0f);
  std::vector<int32_t> labels;
  for (int i = 0; i < 64; ++i) labels.push_back((i * 7) % 10);
  Tensor y = Tensor::ints({64}, labels);
  compare("sparse_softmax_cross_entropy", {logits, y});
  compare("sparse_softmax_cross_entropy_grad", {logits, y, Tensor::uniform({64}, 22, 0.0f, 1.0f)});
  testing::RunOptions piece;  // this device holds 64 of 128 logical rows
  piece.logical_inputs = {{128, 10}, {128}};
  compare("accuracy", {logits, y}, {}, piece);

  labels[17] = 10;
  GpuRun bad = run_cuda("sparse_softmax_cross_entropy", {logits, Tensor::ints({64}, labels)}, {});
  REQUIRE_FALSE(bad.status.ok());
  CHECK(bad.status.message().find("position 17") != std::string::npos);
  // The flag is cleared: the next good run is clean.
  CHECK(run_cuda("sparse_softmax_cross_entropy", {logits, y}, {}).status.ok());
}

// The gather copies values exactly; the gradient adds a row's repeats in
// position order as the CPU does (no atomics), so it is the CPU's bit for
// bit, a whole table's and a block's.
TEST_CASE("embedding its gradient and its mask match the CPU; an id outside the table is named") {
  std::vector<int32_t> ids;
  for (int i = 0; i < 96; ++i) ids.push_back((i * 13) % 40);
  const Tensor id_tensor = Tensor::ints({48, 2}, ids);
  compare("embedding", {id_tensor, Tensor::uniform({40, 16}, 31)});
  compare("embedding_grad", {id_tensor, Tensor::uniform({48, 2, 16}, 32)}, {{"rows", int64_t{40}}});
  compare("embedding_mask", {id_tensor, Tensor::uniform({48, 2, 16}, 33)},
          {{"rows", int64_t{15}}, {"total_rows", int64_t{40}}, {"row_offset", int64_t{10}}});
  // Many ids (several chunks of a block's 256), few rows: long runs of
  // repeats, summed in position order on both sides.
  std::vector<int32_t> many;
  for (int i = 0; i < 1000; ++i) many.push_back((i * 7 + i / 13) % 40);
  for (const Attrs& attrs : {Attrs{{"rows", int64_t{40}}},
                             Attrs{{"rows", int64_t{15}}, {"total_rows", int64_t{40}}, {"row_offset", int64_t{10}}}}) {
    for (const std::vector<Tensor>& in :
         {std::vector<Tensor>{id_tensor, Tensor::uniform({48, 2, 300}, 34)},  // rows wider than a block's threads
          std::vector<Tensor>{Tensor::ints({500, 2}, many), Tensor::uniform({500, 2, 24}, 35)}}) {
      auto cpu = testing::run_op("embedding_grad", in, attrs);
      REQUIRE(cpu.ok());
      GpuRun gpu = run_cuda("embedding_grad", in, attrs);
      REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
      CHECK(gpu.outputs[0].f32 == (*cpu)[0].f32);
    }
  }
  ids[5] = 40;
  GpuRun bad = run_cuda("embedding", {Tensor::ints({48, 2}, ids), Tensor::uniform({40, 16}, 31)}, {});
  REQUIRE_FALSE(bad.status.ok());
  CHECK(bad.status.message().find("position 5") != std::string::npos);
}

// Fused attention: the GPU sums each row's scores and products in another
// order than the CPU (an online softmax over tiles of keys), each output a
// convex mix or a sum of at most 200 terms of values below 2 in magnitude,
// and the tensor-core kernels make each product of floats as three TF32
// products (relative error about 2^-21 each, against float's 2^-24): within
// 2e-4 of the CPU's (relative above 1). Both kernels (the tensor cores' where
// the GPU has them, and those for any GPU); the same bits on a second run.
TEST_CASE("attention and its gradient match the CPU, causal or not, heads up to 128; the same bits twice") {
  struct Case {
    Shape q, kv;
    Attrs attrs;
  };
  // Heads of each width the tensor-core kernels are built for (up to 32,
  // 64, 128), several tiles of 64 rows and part tiles, fewer queries than
  // keys and more.
  for (const char* kernels : {"", "simt"})
  for (const Case& c : {Case{{2, 3, 70, 24}, {2, 3, 70, 24}, {{"causal", int64_t{1}}}},
                        Case{{2, 2, 45, 64}, {2, 2, 100, 64}, {{"scale", 0.2}}},
                        Case{{1, 2, 200, 64}, {1, 2, 200, 64}, {{"causal", int64_t{1}}}},
                        Case{{1, 3, 150, 40}, {1, 3, 90, 40}, {}},
                        Case{{1, 2, 40, 128}, {1, 2, 40, 128}, {{"causal", int64_t{1}}}},
                        Case{{1, 1, 130, 100}, {1, 1, 130, 100}, {{"causal", int64_t{1}}}}}) {
    CAPTURE(kernels);
    CAPTURE(shape_string(c.q));
    CAPTURE(shape_string(c.kv));
    ::setenv("RILL_CUDA_ATTENTION", kernels, 1);
    const std::vector<Tensor> in = {Tensor::uniform(c.q, 91), Tensor::uniform(c.kv, 92), Tensor::uniform(c.kv, 93)};
    auto cpu = testing::run_op("attention", in, c.attrs);
    REQUIRE_MESSAGE(cpu.ok(), cpu.status().to_string());
    GpuRun gpu = run_cuda("attention", in, c.attrs);
    REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
    std::vector<double> bound;
    auto bound_for = [&bound](const std::vector<float>& cpu_values) {
      bound.clear();
      for (float x : cpu_values) bound.push_back(2e-4 * std::max(1.0, std::abs(static_cast<double>(x))));
      return &bound;
    };
    for (size_t o = 0; o < 2; ++o)
      check_close(gpu.outputs[o].f32, (*cpu)[o].f32, bound_for((*cpu)[o].f32), "attention output " + std::to_string(o));
    const std::vector<Tensor> grad_in = {in[0], in[1], in[2], (*cpu)[0], (*cpu)[1], Tensor::uniform(c.q, 94)};
    auto cpu_grad = testing::run_op("attention_grad", grad_in, c.attrs);
    REQUIRE_MESSAGE(cpu_grad.ok(), cpu_grad.status().to_string());
    GpuRun gpu_grad = run_cuda("attention_grad", grad_in, c.attrs);
    REQUIRE_MESSAGE(gpu_grad.status.ok(), gpu_grad.status.to_string());
    for (size_t o = 0; o < 3; ++o)
      check_close(gpu_grad.outputs[o].f32, (*cpu_grad)[o].f32, bound_for((*cpu_grad)[o].f32),
                  "attention_grad output " + std::to_string(o));
    GpuRun again = run_cuda("attention_grad", grad_in, c.attrs);
    REQUIRE(again.status.ok());
    for (size_t o = 0; o < 3; ++o) CHECK(again.outputs[o].f32 == gpu_grad.outputs[o].f32);
  }
  ::unsetenv("RILL_CUDA_ATTENTION");
  GpuRun wide = run_cuda("attention", {Tensor::uniform({1, 4, 130}, 95), Tensor::uniform({1, 4, 130}, 96),
                                       Tensor::uniform({1, 4, 130}, 97)}, {});
  REQUIRE_FALSE(wide.status.ok());
  CHECK(wide.status.message().find("heads of at most 128 values, got 130") != std::string::npos);
}

TEST_CASE("reductions and broadcast_like match the CPU within 2 gamma_n sum|x|, over every axis choice") {
  Tensor x = Tensor::uniform({6, 5, 40}, 31);
  const std::vector<std::vector<int64_t>> axis_sets = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1}};
  for (const auto& axes : axis_sets)
    for (int64_t keep : {0, 1})
      for (const char* op : {"reduce_sum", "reduce_mean"}) {
        CAPTURE(op);
        CAPTURE(keep);
        CAPTURE(axes.size());
        Attrs attrs{{"axes", axes}, {"keepdims", keep}};
        auto cpu = testing::run_op(op, {x}, attrs);
        REQUIRE(cpu.ok());
        GpuRun gpu = run_cuda(op, {x}, attrs);
        REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
        // Every output sums at most all 1200 elements, each |x| < 1.
        std::vector<double> bound((*cpu)[0].f32.size(), 2 * gamma(1200) * 1200 + 4 * kU);
        check_close(gpu.outputs[0].f32, (*cpu)[0].f32, &bound, op);

        Tensor dy = Tensor::uniform((*cpu)[0].shape, 32);
        Attrs grad_attrs = attrs;
        grad_attrs.set("mean", int64_t{std::string(op) == "reduce_mean"});
        compare("broadcast_like", {dy, x}, grad_attrs);
      }
  // Longer runs than a block has threads or rows, and more outputs than a
  // block makes: a bias gradient's column sums, row sums, the whole.
  Tensor wide = Tensor::uniform({700, 130}, 35);
  for (const auto& axes : std::vector<std::vector<int64_t>>{{0}, {1}, {}}) {
    CAPTURE(axes.size());
    Attrs attrs{{"axes", axes}, {"keepdims", int64_t{0}}};
    auto cpu = testing::run_op("reduce_sum", {wide}, attrs);
    REQUIRE(cpu.ok());
    GpuRun gpu = run_cuda("reduce_sum", {wide}, attrs);
    REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
    std::vector<double> bound((*cpu)[0].f32.size(), 2 * gamma(91000) * 91000 + 4 * kU);  // every |x| < 1
    check_close(gpu.outputs[0].f32, (*cpu)[0].f32, &bound, "reduce_sum");
  }
}

TEST_CASE("softmax, mse and the layout ops (transpose, slice, slice_grad, concat) match the CPU") {
  Tensor x = Tensor::uniform({9, 17}, 51, -3.0f, 3.0f);
  compare("softmax", {x});
  compare("softmax_grad", {Tensor::uniform({9, 17}, 52, 0.0f, 1.0f), x});
  Tensor t = Tensor::uniform({9, 17}, 53);
  compare("mse_loss", {x, t});
  testing::RunOptions piece;  // a piece of a logical [18, 17]: the mean divides by the logical count
  piece.logical_inputs = {{18, 17}, {18, 17}};
  compare("mse_loss", {x, t}, {{"reduction", std::string("mean")}}, piece);
  piece.logical_inputs.push_back({});  // dloss
  compare("mse_loss_grad", {x, t, Tensor::floats({}, {0.5f})}, {{"reduction", std::string("mean")}}, piece);
  Tensor cube = Tensor::uniform({3, 4, 5}, 54);
  compare("transpose", {cube}, {{"perm", std::vector<int64_t>{2, 0, 1}}});
  compare("transpose", {x}, {{"perm", std::vector<int64_t>{1, 0}}});
  Attrs box{{"starts", std::vector<int64_t>{1, 0, 2}}, {"ends", std::vector<int64_t>{3, 4, 5}}};
  compare("slice", {cube}, box);
  Attrs back = box;
  back.set("shape", std::vector<int64_t>{3, 4, 5});
  compare("slice_grad", {Tensor::uniform({2, 4, 3}, 55)}, back);
  compare("concat", {cube, Tensor::uniform({3, 2, 5}, 56), Tensor::uniform({3, 1, 5}, 57)}, {{"axis", int64_t{1}}});
}

// Every output here is a sum of at most n = 40 terms, each below M in
// magnitude (|x| <= 3, |xhat| <= sqrt(40), gamma <= 1.5, |dy| <= 1), so
// CUDA's and the CPU's summation orders differ by at most 2 gamma_n n M.
TEST_CASE("the transformer's kernels match the CPU: batched matmul, causal softmax, gelu_tanh, layer_norm") {
  const int64_t c = 40, rows = 12;
  Tensor q = Tensor::uniform({2, 3, 8, 5}, 61), k = Tensor::uniform({2, 3, 8, 5}, 62);
  const double m = 3.0 * 7 * 1.5 + 1;
  std::vector<double> bound(2 * 3 * 8 * 8, 2 * gamma(c) * c * m);
  for (int tb = 0; tb < 2; ++tb) {
    Attrs attrs{{"transpose_b", int64_t{tb}}};
    Tensor kk = tb ? k : Tensor::uniform({2, 3, 5, 8}, 63);
    auto cpu = testing::run_op("matmul", {q, kk}, attrs);
    REQUIRE(cpu.ok());
    GpuRun gpu = run_cuda("matmul", {q, kk}, attrs);
    REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
    check_close(gpu.outputs[0].f32, (*cpu)[0].f32, &bound, "batched matmul");
  }
  Tensor x = Tensor::uniform({2, 3, 8, 8}, 64, -3.0f, 3.0f);
  compare("softmax", {x}, {{"causal", int64_t{1}}, {"scale", 0.4}});
  compare("softmax_grad", {Tensor::uniform(x.shape, 65, 0.0f, 1.0f), x}, {{"scale", 0.4}});
  compare("gelu_tanh", {x});
  compare("gelu_tanh_grad", {x, Tensor::uniform(x.shape, 66)});
  // bias_add and gelu_tanh fused: the same formula on x + b, b by the last axis.
  const Tensor b = Tensor::uniform({x.shape.back()}, 67);
  compare("bias_gelu_tanh", {x, b});
  compare("bias_gelu_tanh_grad", {x, b, Tensor::uniform(x.shape, 68)});
  compare("bias_add", {x, Tensor::uniform({8, 8}, 67)});
  Tensor h = Tensor::uniform({3, 4, c}, 68, -3.0f, 3.0f);
  Tensor gamma_ = Tensor::uniform({c}, 69, 0.5f, 1.5f), beta = Tensor::uniform({c}, 70);
  auto cpu = testing::run_op("layer_norm", {h, gamma_, beta});
  REQUIRE(cpu.ok());
  GpuRun gpu = run_cuda("layer_norm", {h, gamma_, beta}, {});
  REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
  for (size_t o = 0; o < 3; ++o) {
    std::vector<double> b((*cpu)[o].f32.size(), 2 * gamma(c) * c * m);
    check_close(gpu.outputs[o].f32, (*cpu)[o].f32, &b, "layer_norm output " + std::to_string(o));
  }
  std::vector<Tensor> grad_in = {Tensor::uniform(h.shape, 71), h, (*cpu)[1], (*cpu)[2], gamma_};
  auto cpu_grad = testing::run_op("layer_norm_grad", grad_in);
  REQUIRE(cpu_grad.ok());
  GpuRun gpu_grad = run_cuda("layer_norm_grad", grad_in, {});
  REQUIRE_MESSAGE(gpu_grad.status.ok(), gpu_grad.status.to_string());
  for (size_t o = 0; o < 3; ++o) {
    std::vector<double> b((*cpu_grad)[o].f32.size(), 2 * gamma(std::max(c, rows)) * std::max(c, rows) * m);
    check_close(gpu_grad.outputs[o].f32, (*cpu_grad)[o].f32, &b, "layer_norm_grad output " + std::to_string(o));
  }
}

TEST_CASE("cross-entropy and accuracy over a language model's [B, T, V] logits match the CPU") {
  Tensor logits = Tensor::uniform({3, 5, 301}, 86, -4.0f, 4.0f);
  std::vector<int32_t> ids(15);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % 301);
  Tensor labels = Tensor::ints({3, 5}, ids);
  compare("sparse_softmax_cross_entropy", {logits, labels});
  compare("sparse_softmax_cross_entropy_grad", {logits, labels, Tensor::uniform({3, 5}, 87)});
  testing::RunOptions piece;  // a piece of a logical [6, 5, 301]: accuracy divides by the logical rows
  piece.logical_inputs = {{6, 5, 301}, {6, 5}};
  compare("accuracy", {logits, labels}, {}, piece);
}

TEST_CASE("cast between f32, bf16 and f16 and the layout ops on bf16 give the CPU's bits") {
  Tensor x = Tensor::uniform({5, 37}, 61, -300.0f, 300.0f);
  const float specials[] = {std::nanf(""), INFINITY, -INFINITY, 65520.0f, 1e-8f, -3e-6f, 0.0f, -0.0f, 1e30f};
  for (size_t i = 0; i < std::size(specials); ++i) x.f32[i * 3] = specials[i];
  for (const char* to : {"bf16", "f16"}) {
    CAPTURE(to);
    auto cpu = testing::run_op("cast", {x}, {{"dtype", std::string(to)}});
    REQUIRE(cpu.ok());
    GpuRun gpu = run_cuda("cast", {x}, {{"dtype", std::string(to)}});
    REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
    CHECK(gpu.outputs[0].h16 == (*cpu)[0].h16);
    for (const char* next : {"f32", "bf16", "f16"}) {
      CAPTURE(next);
      auto cpu2 = testing::run_op("cast", {(*cpu)[0]}, {{"dtype", std::string(next)}});
      REQUIRE(cpu2.ok());
      GpuRun gpu2 = run_cuda("cast", {(*cpu)[0]}, {{"dtype", std::string(next)}});
      REQUIRE_MESSAGE(gpu2.status.ok(), gpu2.status.to_string());
      CHECK(gpu2.outputs[0].h16 == (*cpu2)[0].h16);
      const std::vector<float> a = gpu2.outputs[0].f32, b = (*cpu2)[0].f32;
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK((a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))));
    }
  }
  const Tensor h = Tensor::halves({3, 4, 5}, DType::kBF16, Tensor::uniform({3, 4, 5}, 62).f32);
  struct Case {
    const char* op;
    std::vector<Tensor> in;
    Attrs attrs;
  };
  for (const Case& c : {Case{"transpose", {h}, {{"perm", std::vector<int64_t>{2, 0, 1}}}},
                        Case{"slice", {h}, {{"starts", std::vector<int64_t>{1, 0, 2}}, {"ends", std::vector<int64_t>{3, 3, 4}}}},
                        Case{"concat", {h, h}, {{"axis", int64_t{2}}}}}) {
    CAPTURE(c.op);
    auto cpu = testing::run_op(c.op, c.in, c.attrs);
    REQUIRE(cpu.ok());
    GpuRun gpu = run_cuda(c.op, c.in, c.attrs);
    REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
    CHECK(gpu.outputs[0].h16 == (*cpu)[0].h16);
  }
}

}  // namespace rill

int main(int argc, char** argv) {
  if (rill::cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device here (the CUDA kernels are tested where a GPU is present)\n");
    return 77;  // meson's "skipped"
  }
  doctest::Context context(argc, argv);
  return context.run();
}
