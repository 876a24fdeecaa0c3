// The CUDA module's side of shared_gpu.h: IPC-exported device memory, and
// the combination kernel's launch (shared_gpu.cu).
#include "kernels/cuda/shared_gpu.h"

#include <cstring>

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/shared_gpu_launch.h"

namespace rill::shared_gpu {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(IpcHandle));
static_assert(cuda_launch::kMaxCombined == kMaxSharedGpuRanks);

// Runs `f` with `device` current, then gives the calling thread its device back.
template <typename F>
auto on_device(int device, const char* what, F&& f) -> decltype(f()) {
  int current = -1;
  const bool known = cudaGetDevice(&current) == cudaSuccess;
  if (Status s = cuda_status(cudaSetDevice(device), "cudaSetDevice", what); !s.ok()) return s;
  auto result = f();
  if (known) (void)cudaSetDevice(current);
  return result;
}

}  // namespace

StatusOr<SharedBuffer> allocate(int device, size_t bytes) {
  return on_device(device, "a buffer shared with ranks on this GPU", [&]() -> StatusOr<SharedBuffer> {
    const char* what = "a buffer shared with ranks on this GPU";
    SharedBuffer out;
    RILL_RETURN_IF_ERROR(cuda_status(cudaMalloc(&out.data, bytes > 0 ? bytes : 1), "cudaMalloc", what));
    // Not cleared: every call writes what it reads (a memset on the legacy
    // stream would not be ordered with the contexts' streams anyway).
    cudaIpcMemHandle_t handle;
    Status s = cuda_status(cudaIpcGetMemHandle(&handle, out.data), "cudaIpcGetMemHandle", what);
    if (!s.ok()) {
      (void)cudaFree(out.data);
      return s;
    }
    std::memcpy(out.handle.data(), &handle, sizeof handle);
    return out;
  });
}

void free(int device, void* data) {
  if (data == nullptr) return;
  (void)on_device(device, "freeing a shared buffer", [&] { return cuda_status(cudaFree(data), "cudaFree", ""); });
}

StatusOr<void*> open(int device, const IpcHandle& handle) {
  return on_device(device, "another rank's buffer on this GPU", [&]() -> StatusOr<void*> {
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), sizeof h);
    void* mapped = nullptr;
    const cudaError_t error = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: the caller goes on without it
      return cuda_status(error, "cudaIpcOpenMemHandle", "another rank's buffer on this GPU");
    }
    return mapped;
  });
}

void close(int device, void* mapped) {
  if (mapped == nullptr) return;
  (void)on_device(device, "closing another rank's buffer",
                  [&] { return cuda_status(cudaIpcCloseMemHandle(mapped), "cudaIpcCloseMemHandle", ""); });
}

Status reduce(CudaContext& cuda, std::span<const void* const> sources, void* dst, size_t elements, DType dtype,
              int op, const char* what) {
  cuda_launch::Element element = cuda_launch::Element::kF32;
  switch (dtype) {
    case DType::kF32: element = cuda_launch::Element::kF32; break;
    case DType::kI32: element = cuda_launch::Element::kI32; break;
    case DType::kBF16: element = cuda_launch::Element::kBF16; break;
    case DType::kF16: element = cuda_launch::Element::kF16; break;
  }
  if (sources.empty() || sources.size() > static_cast<size_t>(cuda_launch::kMaxCombined))
    return invalid_argument("combining {} buffers ({}): 1 to {}", sources.size(), what, cuda_launch::kMaxCombined);
  RILL_RETURN_IF_ERROR(cuda.activate(what));  // its stream's device current
  return cuda_status(cuda_launch::combine_buffers(sources.data(), static_cast<int>(sources.size()), dst,
                                                  static_cast<int64_t>(elements), element, op,
                                                  static_cast<cudaStream_t>(cuda.stream())),
                     "combine_buffers", what);
}

}  // namespace rill::shared_gpu
