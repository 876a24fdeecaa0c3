// The attention kernels alone at GPT-2 124M's shape (16 x 12 heads, context
// 1024, heads 64 wide, causal): the tensor-core kernels (attention_mma.cu)
// in the configuration Rill runs and in others (tiles, blocks per SM),
// beside the kernels every GPU runs (attention.cu). Median time of 20
// launches each, TFLOP/s counting the causal products only (forward 2, dq
// 3, dk and dv 4 [t, t/2] x d products), and each output's largest
// difference from the configuration Rill runs. bench/attention_bench.sh
// builds and runs it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "kernels/ops/attention_mma.cu"
#include "kernels/ops/cuda_launch.h"

namespace {

using namespace rill::cuda_launch;

constexpr int64_t kHeads = 16 * 12, kT = 1024;
constexpr int kD = 64;
constexpr float kScale = 0.125f;

#define CHECK(call)                                                                        \
  do {                                                                                     \
    const cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

struct Buffers {
  float *q, *k, *v, *dy, *y, *lse, *dq, *dk, *dv;
};

float* device_array(size_t n, std::mt19937* rng) {
  float* p = nullptr;
  CHECK(cudaMalloc(&p, n * sizeof(float)));
  if (rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> host(n);
    for (float& x : host) x = u(*rng);
    CHECK(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  } else {
    CHECK(cudaMemset(p, 0, n * sizeof(float)));
  }
  return p;
}

std::vector<float> host_copy(const float* p, size_t n) {
  std::vector<float> h(n);
  CHECK(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Median milliseconds of `runs` launches of f.
float time_ms(const std::function<cudaError_t()>& f, int runs = 20) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(f());  // warm
  std::vector<float> ms;
  for (int r = 0; r < runs; ++r) {
    CHECK(cudaEventRecord(start));
    CHECK(f());
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float x = 0.0f;
    CHECK(cudaEventElapsedTime(&x, start, stop));
    ms.push_back(x);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms[ms.size() / 2];
}

// FLOPs of `products` causal [t, t] x d products over every head.
double flops(int products) { return products * 2.0 * kHeads * (kT * (kT + 1) / 2.0) * kD; }

void report(const char* name, float ms, int products, const std::vector<std::pair<const char*, float>>& diffs) {
  std::printf("%-34s %8.3f ms %7.1f TFLOP/s", name, ms, flops(products) / (ms * 1e-3) / 1e12);
  for (const auto& [what, d] : diffs) std::printf("  %s %.2e", what, d);
  std::printf("\n");
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  const size_t n = static_cast<size_t>(kHeads * kT * kD);
  Buffers b{device_array(n, &rng), device_array(n, &rng), device_array(n, &rng), device_array(n, &rng),
            device_array(n, nullptr), device_array(kHeads * kT, nullptr), device_array(n, nullptr),
            device_array(n, nullptr), device_array(n, nullptr)};
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %lld heads x %lld x %d, causal; tensor-core kernels %s\n", prop.name,
              static_cast<long long>(kHeads), static_cast<long long>(kT), kD,
              attention_mma_available() ? "available" : "NOT available");
  if (!attention_mma_available()) return 1;
  cudaStream_t st = nullptr;
  auto fwd = [&] { return attention_mma(b.q, b.k, b.v, b.y, b.lse, kHeads, kT, kT, kD, kScale, true, st); };
  auto bwd = [&] {
    return attention_grad_mma(b.q, b.k, b.v, b.y, b.lse, b.dy, b.dq, b.dk, b.dv, kHeads, kT, kT, kD, kScale, true,
                              st);
  };
  CHECK(fwd());
  CHECK(bwd());
  CHECK(cudaDeviceSynchronize());
  const auto y = host_copy(b.y, n), lse = host_copy(b.lse, kHeads * kT), dq = host_copy(b.dq, n),
             dk = host_copy(b.dk, n), dv = host_copy(b.dv, n);
  report("rill forward (tensor cores)", time_ms(fwd), 2, {});
  report("rill backward (tensor cores)", time_ms(bwd), 7, {});

  setenv("RILL_CUDA_ATTENTION", "simt", 1);
  auto simt_fwd = [&] { return attention(b.q, b.k, b.v, b.y, b.lse, kHeads, kT, kT, kD, kScale, true, st); };
  auto simt_bwd = [&] {
    return attention_grad(b.q, b.k, b.v, b.y, b.lse, b.dy, b.dq, b.dk, b.dv, kHeads, kT, kT, kD, kScale, true, st);
  };
  const float simt_fwd_ms = time_ms(simt_fwd, 5);
  report("simt forward", simt_fwd_ms, 2, {{"y", max_diff(host_copy(b.y, n), y)}, {"lse", max_diff(host_copy(b.lse, kHeads * kT), lse)}});
  CHECK(fwd());  // y and lse of the tensor cores again, for the backward
  const float simt_bwd_ms = time_ms(simt_bwd, 5);
  report("simt backward", simt_bwd_ms, 7, {{"dq", max_diff(host_copy(b.dq, n), dq)}, {"dk", max_diff(host_copy(b.dk, n), dk)}, {"dv", max_diff(host_copy(b.dv, n), dv)}});

#define FORWARD(KB, MINB)                                                                              \
  report("forward key tile " #KB ", " #MINB " blocks/SM",                                              \
         time_ms([&] {                                                                                 \
           return forward<kD, KB, MINB>(b.q, b.k, b.v, b.y, b.lse, kHeads, kT, kT, kD, kScale, true, true, st); \
         }),                                                                                           \
         2, {{"y", max_diff(host_copy(b.y, n), y)}});
  FORWARD(16, 1) FORWARD(16, 2) FORWARD(16, 3) FORWARD(32, 1) FORWARD(32, 2) FORWARD(32, 3)
  CHECK(fwd());
#define DQ(KB, MINB)                                                                                             \
  report("dq key tile " #KB ", " #MINB " blocks/SM",                                                             \
         time_ms([&] {                                                                                           \
           return backward_dq<kD, KB, MINB>(b.q, b.k, b.v, b.y, b.lse, b.dy, b.dq, kHeads, kT, kT, kD, kScale, true, \
                                            true, st);                                                           \
         }),                                                                                                     \
         3, {{"dq", max_diff(host_copy(b.dq, n), dq)}});
  DQ(16, 1) DQ(16, 2) DQ(16, 3) DQ(32, 1) DQ(32, 2) DQ(32, 3)
#define DKDV(QB, MINB)                                                                                       \
  report("dk dv query tile " #QB ", " #MINB " blocks/SM",                                                    \
         time_ms([&] {                                                                                       \
           return backward_dkdv<kD, QB, MINB>(b.q, b.k, b.v, b.y, b.lse, b.dy, b.dq, b.dk, b.dv, kHeads, kT, kT, \
                                              kD, kScale, true, true, st);                                   \
         }),                                                                                                 \
         4, {{"dk", max_diff(host_copy(b.dk, n), dk)}, {"dv", max_diff(host_copy(b.dv, n), dv)}});
  DKDV(16, 1) DKDV(16, 2) DKDV(16, 3) DKDV(32, 1) DKDV(32, 2) DKDV(32, 3)
  return 0;
}
