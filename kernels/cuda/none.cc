// A build without CUDA: no op has a CUDA kernel, no GPU is ever used, and a
// CudaContext cannot be made (the reason says so).
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda_kernels.h"

namespace rill {

KernelFn find_cuda_kernel(std::string_view) { return nullptr; }

int cuda_device_count() { return 0; }

StatusOr<std::unique_ptr<CudaContext>> CudaContext::create(int device, bool) {
  return invalid_argument("cuda:{}: this build of Rill has no CUDA support", device);
}

CudaContext::~CudaContext() = default;
Status CudaContext::activate(const char*) { return internal_error("no CUDA in this build"); }
Status CudaContext::synchronize(const char*) { return internal_error("no CUDA in this build"); }
StatusOr<void*> CudaContext::allocate(size_t, const char*) { return internal_error("no CUDA in this build"); }
void CudaContext::release(void*) {}
Status CudaContext::copy(void*, const void*, size_t, CopyKind, const char*) {
  return internal_error("no CUDA in this build");
}

}  // namespace rill
