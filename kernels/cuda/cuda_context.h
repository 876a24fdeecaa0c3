// CudaContext: what a CUDA kernel needs of its device: the stream it enqueues
// on, the cuBLAS handle bound to that stream, and a device flag kernels raise
// on bad data (a label out of range), read when the stream's work is known
// complete. One per device thread; used by that thread only.
//
// Errors from CUDA and cuBLAS become Rill errors naming the call and the op.
#pragma once

#include <cstdint>
#include <memory>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "base/status.h"

namespace rill {

struct CudaContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // Device memory: 0, or 1 + the position of the first bad label a kernel met.
  int64_t* bad_label = nullptr;

  // allow_tf32: let cuBLAS round matmul inputs to TF32 on tensor cores (about
  // 1e-3 relative error, several times faster); off, results match the CPU's
  // float GEMM within float rounding.
  static StatusOr<std::unique_ptr<CudaContext>> create(int device, bool allow_tf32 = false);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // Waits for the stream, then reports a raised bad-label flag (and clears it).
  Status synchronize(const char* what);

 private:
  CudaContext() = default;
};

// How many CUDA devices this process can use: 0 where there is no GPU or no
// driver (never an error: CPU-only machines simply have none).
int cuda_device_count();

// Rill errors from CUDA and cuBLAS results, naming the call and what it was for.
Status cuda_status(cudaError_t error, const char* call, const char* what);
Status cublas_status(cublasStatus_t status, const char* call, const char* what);

}  // namespace rill
