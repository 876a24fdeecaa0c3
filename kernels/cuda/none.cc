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

struct CudaContext::Events {};
CudaContext::CudaContext() = default;
CudaContext::~CudaContext() = default;
int64_t CudaContext::synchronizes() { return 0; }
int64_t CudaContext::device_bytes() { return 0; }
int64_t CudaContext::device_bytes_peak() { return 0; }
StatusOr<uint64_t> CudaContext::record(const char*) { return internal_error("no CUDA in this build"); }
StatusOr<bool> CudaContext::done(uint64_t, const char*) { return internal_error("no CUDA in this build"); }
StatusOr<void*> CudaContext::allocate_host(size_t, const char*) { return internal_error("no CUDA in this build"); }
void CudaContext::release_host(void*) {}
Status CudaContext::memory_info(size_t*, size_t*, const char*) { return internal_error("no CUDA in this build"); }
Status CudaContext::copy_beside(void*, const void*, size_t, CopyKind, void*, const char*) {
  return internal_error("no CUDA in this build");
}
StatusOr<void*> CudaContext::create_event(const char*) { return internal_error("no CUDA in this build"); }
void CudaContext::destroy_event(void*) {}
Status CudaContext::mark(void*, const char*) { return internal_error("no CUDA in this build"); }
Status CudaContext::activate(const char*) { return internal_error("no CUDA in this build"); }
Status CudaContext::synchronize(const char*) { return internal_error("no CUDA in this build"); }
StatusOr<void*> CudaContext::allocate(size_t, const char*) { return internal_error("no CUDA in this build"); }
void CudaContext::release(void*) {}
Status CudaContext::copy(void*, const void*, size_t, CopyKind, const char*) {
  return internal_error("no CUDA in this build");
}

}  // namespace rill
