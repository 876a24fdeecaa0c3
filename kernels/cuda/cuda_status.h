// Rill errors from CUDA and cuBLAS results, naming the call and what it was
// for. For the files of a build with CUDA only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "base/status.h"

namespace rill {

Status cuda_status(cudaError_t error, const char* call, const char* what);
Status cublas_status(cublasStatus_t status, const char* call, const char* what);

}  // namespace rill
