// The ops with a CUDA kernel, listed explicitly (as kernels/registry.cc lists
// the ops). An op missing here has no CUDA kernel yet: docs/ROADMAP.md says which.
#include <string_view>

#include "kernels/cuda_kernels.h"
#include "kernels/ops/cuda_ops.h"

namespace rill {
namespace {

struct Entry {
  std::string_view type;
  KernelFn kernel;
};

constexpr Entry kCudaKernels[] = {
    {"matmul", cuda_ops::matmul},
    {"identity", cuda_ops::copy}, {"reshape", cuda_ops::copy},
    {"sgd_update", cuda_ops::sgd_update}, {"momentum_update", cuda_ops::momentum_update},
    {"adam_update", cuda_ops::adam_update},
    {"add", cuda_ops::add}, {"sub", cuda_ops::sub}, {"mul", cuda_ops::mul}, {"bias_add", cuda_ops::bias_add},
    {"scale", cuda_ops::scale}, {"accumulate", cuda_ops::accumulate}, {"ones_like", cuda_ops::ones_like},
    {"relu", cuda_ops::relu}, {"gelu", cuda_ops::gelu}, {"gelu_tanh", cuda_ops::gelu_tanh}, {"tanh", cuda_ops::tanh}, {"sigmoid", cuda_ops::sigmoid},
    {"relu_grad", cuda_ops::relu_grad}, {"gelu_grad", cuda_ops::gelu_grad},
    {"gelu_tanh_grad", cuda_ops::gelu_tanh_grad}, {"tanh_grad", cuda_ops::tanh_grad},
    {"sigmoid_grad", cuda_ops::sigmoid_grad},
    {"sparse_softmax_cross_entropy", cuda_ops::sparse_softmax_cross_entropy},
    {"sparse_softmax_cross_entropy_grad", cuda_ops::sparse_softmax_cross_entropy_grad},
    {"accuracy", cuda_ops::accuracy},
    {"embedding", cuda_ops::embedding}, {"embedding_grad", cuda_ops::embedding_grad},
    {"embedding_mask", cuda_ops::embedding_mask},
    {"reduce_sum", cuda_ops::reduce_sum}, {"reduce_mean", cuda_ops::reduce_mean},
    {"broadcast_like", cuda_ops::broadcast_like},
    {"layer_norm", cuda_ops::layer_norm}, {"layer_norm_grad", cuda_ops::layer_norm_grad},
    {"dropout", cuda_ops::dropout},
    {"sum_squares", cuda_ops::sum_squares}, {"add_n", cuda_ops::add_n}, {"clip_factor", cuda_ops::clip_factor},
    {"softmax", cuda_ops::softmax}, {"softmax_grad", cuda_ops::softmax_grad},
    {"mse_loss", cuda_ops::mse_loss}, {"mse_loss_grad", cuda_ops::mse_loss_grad},
    {"transpose", cuda_ops::transpose}, {"slice", cuda_ops::slice}, {"slice_grad", cuda_ops::slice_grad},
    {"concat", cuda_ops::concat},
    // The collectives' finishing step (the exchange is a boxing): the mean's
    // scale, or a copy (attr `scale` 1).
    {"all_reduce", cuda_ops::scale}, {"reduce_scatter", cuda_ops::scale}, {"all_gather", cuda_ops::copy},
};

}  // namespace

KernelFn find_cuda_kernel(std::string_view type) {
  for (const Entry& e : kCudaKernels)
    if (e.type == type) return e.kernel;
  return nullptr;
}

}  // namespace rill
