// The CUDA kernels of the ops, looked up by op type: each OpDef names its
// kernel (OpDef::cuda), which the CUDA module exports (RILL_CUDA_KERNEL,
// kernels/cuda/cuda_kernel.h). Built when meson finds nvcc (-Dcuda=auto);
// in a build without CUDA every lookup returns nullptr.
#pragma once

#include <string_view>

#include "kernels/op.h"

namespace rill {

// The CUDA kernel of `type`, or nullptr (no such kernel, or no CUDA in this build).
KernelFn find_cuda_kernel(std::string_view type);

}  // namespace rill
