// The CUDA kernel tests' harness: a kernel run as an actor would on the
// one GPU (outputs shaped by the op's inference and filled with NaN first),
// and its results compared with the CPU kernel's within a bound
// (tests/kernels/cuda_kernels_test.cc says why the bounds hold).
#pragma once

#include <string>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "tests/kernels/grad_check.h"

namespace rill::cuda_test {

using testing::Tensor;

inline constexpr double kU = 1.0 / (1 << 24);  // float's unit roundoff

// The GPU's context, made on first use.
CudaContext& context();

struct GpuRun {
  Status status;
  std::vector<Tensor> outputs;
  std::vector<Tensor> inputs;  // after the kernel (updates write input 0)
  std::vector<Tensor> state;
};

// Runs the CUDA kernel of `type` as an actor would.
GpuRun run_cuda(const std::string& type, std::vector<Tensor> inputs, const Attrs& attrs,
                const testing::RunOptions& options = {});

// Fails the check where |gpu - cpu| exceeds bound[i], or by default
// 1e-5 * max(1, |cpu|) (NaN on both sides agrees).
void check_close(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::vector<double>* bound,
                 const std::string& what);

// CPU and CUDA kernels of `type` on the same inputs; outputs (and, for
// updates, input 0 and the state) must agree within the elementwise bound,
// i32 outputs exactly.
void compare(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
             testing::RunOptions options = {});

// Higham's gamma_n: the bound on a sum of n float terms' relative error.
double gamma(int64_t n);

}  // namespace rill::cuda_test
