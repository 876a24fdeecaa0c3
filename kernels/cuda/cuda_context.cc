#include "kernels/cuda/cuda_context.h"

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
  ctx->device = device;
  const std::string what = fmt::format("cuda:{}", device);
  RILL_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice", what.c_str()));
  RILL_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking),
                                   "cudaStreamCreateWithFlags", what.c_str()));
  RILL_RETURN_IF_ERROR(cublas_status(cublasCreate(&ctx->cublas), "cublasCreate", what.c_str()));
  RILL_RETURN_IF_ERROR(cublas_status(cublasSetStream(ctx->cublas, ctx->stream), "cublasSetStream", what.c_str()));
  RILL_RETURN_IF_ERROR(cublas_status(
      cublasSetMathMode(ctx->cublas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH),
      "cublasSetMathMode", what.c_str()));
  RILL_RETURN_IF_ERROR(cuda_status(cudaMalloc(reinterpret_cast<void**>(&ctx->bad_label), sizeof(int64_t)), "cudaMalloc", what.c_str()));
  RILL_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(ctx->bad_label, 0, sizeof(int64_t), ctx->stream),
                                   "cudaMemsetAsync", what.c_str()));
  return ctx;
}

CudaContext::~CudaContext() {
  if (stream) (void)cudaStreamSynchronize(stream);
  if (bad_label) (void)cudaFree(bad_label);
  if (cublas) (void)cublasDestroy(cublas);
  if (stream) (void)cudaStreamDestroy(stream);
}

Status CudaContext::synchronize(const char* what) {
  int64_t flag = 0;
  RILL_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(&flag, bad_label, sizeof flag, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync", what));
  RILL_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize", what));
  if (flag != 0) {
    RILL_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(bad_label, 0, sizeof flag, stream), "cudaMemsetAsync", what));
    return invalid_argument("{}: the label at position {} is outside the classes", what, flag - 1);
  }
  return {};
}

}  // namespace rill
