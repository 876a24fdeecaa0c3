#include "kernels/cuda/cuda_context.h"

#include "kernels/cuda/cuda_status.h"

namespace rill {

Status cuda_status(cudaError_t error, const char* call, const char* what) {
  if (error == cudaSuccess) return {};
  return Status(Code::kInternal, fmt::format("{}: {} failed: {} ({})", what, call, cudaGetErrorString(error),
                                             cudaGetErrorName(error)));
}

Status cublas_status(cublasStatus_t status, const char* call, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return {};
  return Status(Code::kInternal, fmt::format("{}: {} failed: {} ({})", what, call, cublasGetStatusString(status),
                                             cublasGetStatusName(status)));
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not sticky
    return 0;
  }
  return count;
}

StatusOr<std::unique_ptr<CudaContext>> CudaContext::create(int device, bool allow_tf32) {
  std::unique_ptr<CudaContext> ctx(new CudaContext());
  ctx->device_ = device;
  const std::string what = fmt::format("cuda:{}", device);
  const int count = cuda_device_count();
  if (device < 0 || device >= count)
    return Status(Code::kUnavailable, fmt::format("{}: this machine has {} CUDA device(s)", what, count));
  RILL_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice", what.c_str()));
  cudaStream_t stream = nullptr;
  RILL_RETURN_IF_ERROR(
      cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", what.c_str()));
  ctx->stream_ = stream;
  cublasHandle_t handle = nullptr;
  RILL_RETURN_IF_ERROR(cublas_status(cublasCreate(&handle), "cublasCreate", what.c_str()));
  ctx->cublas_ = handle;
  RILL_RETURN_IF_ERROR(cublas_status(cublasSetStream(handle, stream), "cublasSetStream", what.c_str()));
  RILL_RETURN_IF_ERROR(cublas_status(
      cublasSetMathMode(handle, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH), "cublasSetMathMode",
      what.c_str()));
  RILL_ASSIGN_OR_RETURN(void* flag, ctx->allocate(sizeof(int64_t), what.c_str()));
  ctx->bad_label_ = static_cast<int64_t*>(flag);
  return ctx;
}

CudaContext::~CudaContext() {
  if (stream_) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (bad_label_) (void)cudaFree(bad_label_);
  if (cublas_) (void)cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status CudaContext::activate(const char* what) { return cuda_status(cudaSetDevice(device_), "cudaSetDevice", what); }

Status CudaContext::synchronize(const char* what) {
  auto stream = static_cast<cudaStream_t>(stream_);
  int64_t flag = 0;
  RILL_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(&flag, bad_label_, sizeof flag, cudaMemcpyDeviceToHost, stream),
                                   "cudaMemcpyAsync", what));
  RILL_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize", what));
  if (flag != 0) {
    RILL_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(bad_label_, 0, sizeof flag, stream), "cudaMemsetAsync", what));
    return invalid_argument("{}: the label or id at position {} is out of range (outside the classes, or the rows "
                            "of the embedding table)",
                            what, flag - 1);
  }
  return {};
}

StatusOr<void*> CudaContext::allocate(size_t bytes, const char* what) {
  RILL_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice", what));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status(Code::kUnavailable, fmt::format("{}: out of device memory for {} bytes on cuda:{}", what, bytes, device_));
  }
  RILL_RETURN_IF_ERROR(cuda_status(e, "cudaMalloc", what));
  RILL_RETURN_IF_ERROR(cuda_status(cudaMemset(p, 0, bytes), "cudaMemset", what));
  return p;
}

void CudaContext::release(void* device_memory) {
  if (device_memory) (void)cudaFree(device_memory);
}

Status CudaContext::copy(void* dst, const void* src, size_t bytes, CopyKind kind, const char* what) {
  if (bytes == 0) return {};
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream_)), "cudaMemcpyAsync", what);
}

}  // namespace rill
