// The CUDA kernels of the ops, looked up by op type. Built when meson finds
// nvcc (-Dcuda=auto); in a build without CUDA every lookup returns nullptr.
// The ops with a CUDA kernel are listed in kernels/cuda/registry.cu.
#pragma once

#include <string_view>

#include "kernels/op.h"

namespace rill {

// The CUDA kernel of `type`, or nullptr (no such kernel, or no CUDA in this build).
KernelFn find_cuda_kernel(std::string_view type);

}  // namespace rill
