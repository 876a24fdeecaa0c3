// relu, gelu, gelu_tanh, tanh, sigmoid and their gradients on CUDA: the same scalar
// formulas as the CPU kernels (activation_math.h), one thread per element.
#include "kernels/ops/activation_math.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

template <act::Act kAct>
cudaError_t forward_all(const float* x, float* y, int64_t n, cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) { y[i] = act::forward<kAct>(x[i]); });
}

template <act::Act kAct>
cudaError_t backward_all(const float* t, const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) { dx[i] = act::backward<kAct>(t[i], dy[i]); });
}

}  // namespace

cudaError_t activation(Activation a, const float* x, float* y, int64_t n, cudaStream_t stream) {
  switch (a) {
    case Activation::kRelu: return forward_all<act::Act::kRelu>(x, y, n, stream);
    case Activation::kGelu: return forward_all<act::Act::kGelu>(x, y, n, stream);
    case Activation::kTanh: return forward_all<act::Act::kTanh>(x, y, n, stream);
    case Activation::kSigmoid: return forward_all<act::Act::kSigmoid>(x, y, n, stream);
    case Activation::kGeluTanh: return forward_all<act::Act::kGeluTanh>(x, y, n, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t activation_grad(Activation a, const float* t, const float* dy, float* dx, int64_t n,
                            cudaStream_t stream) {
  switch (a) {
    case Activation::kRelu: return backward_all<act::Act::kRelu>(t, dy, dx, n, stream);
    case Activation::kGelu: return backward_all<act::Act::kGelu>(t, dy, dx, n, stream);
    case Activation::kTanh: return backward_all<act::Act::kTanh>(t, dy, dx, n, stream);
    case Activation::kSigmoid: return backward_all<act::Act::kSigmoid>(t, dy, dx, n, stream);
    case Activation::kGeluTanh: return backward_all<act::Act::kGeluTanh>(t, dy, dx, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace rill::cuda_launch
