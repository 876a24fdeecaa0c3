// CudaContext: what work on one GPU needs: the stream that work is enqueued
// on, the cuBLAS handle bound to it, device memory and copies, and a device
// flag kernels raise on bad data (a label out of range), read when the
// stream's work is known complete. One per device thread; used by that
// thread only.
//
// The header names no CUDA type, so every part of Rill can hold one: a build
// with CUDA implements it in cuda_context.cc, a build without it in none.cc,
// where create() fails with the reason and cuda_device_count() is 0. CUDA and
// cuBLAS errors become Rill errors naming the call and what it was for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace rill {

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class CudaContext {
 public:
  // allow_tf32: let cuBLAS round matmul inputs to TF32 on tensor cores (about
  // 1e-3 relative error, several times faster); off, results match the CPU's
  // float GEMM within float rounding.
  static StatusOr<std::unique_ptr<CudaContext>> create(int device, bool allow_tf32 = false);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  void* stream() const { return stream_; }  // a cudaStream_t
  void* cublas() const { return cublas_; }  // a cublasHandle_t
  // Device memory: 0, or 1 + the position of the first bad label (or
  // embedding id) a kernel met.
  int64_t* bad_label() const { return bad_label_; }

  // Makes this context's device current on the calling thread.
  Status activate(const char* what);
  // Waits for the stream, then reports a raised bad-label flag (and clears it).
  Status synchronize(const char* what);
  StatusOr<void*> allocate(size_t bytes, const char* what);  // device memory, zeroed
  void release(void* device_memory);
  // Enqueues a copy on the stream (host memory may be pageable: then the
  // copy completes before it returns).
  Status copy(void* dst, const void* src, size_t bytes, CopyKind kind, const char* what);

 private:
  CudaContext() = default;
  int device_ = 0;
  void* stream_ = nullptr;
  void* cublas_ = nullptr;
  int64_t* bad_label_ = nullptr;
};

// Device memory owned by a unique_ptr: released through its context.
struct DeviceFree {
  CudaContext* cuda = nullptr;
  void operator()(void* p) const {
    if (cuda) cuda->release(p);
  }
};
using DeviceBuffer = std::unique_ptr<void, DeviceFree>;

// How many CUDA devices this process can use: 0 where there is no GPU or no
// driver, and in a build without CUDA (never an error).
int cuda_device_count();

// OK when this machine has at least `count` CUDA devices; else an error
// naming what was asked for ("cuda:2") and what there is.
inline Status require_cuda_devices(int count, const std::string& where) {
  const int have = cuda_device_count();
  if (have >= count) return {};
  return Status(Code::kUnavailable, fmt::format("{}: cuda:{} asks for {} GPU(s), but this machine has {} CUDA device(s)",
                                                where, count, count, have));
}

}  // namespace rill
