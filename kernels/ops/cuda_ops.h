// The CUDA kernels of the ops, with the CPU kernels' signature: each turns its
// KernelContext into work on ctx.cuda->stream (kernels/ops/*.cu, cuBLAS) and
// returns without waiting. kernels/cuda/registry.cc maps op types to them.
#pragma once

#include "kernels/op.h"

namespace rill::cuda_ops {

Status matmul(KernelContext& ctx);
Status bias_add(KernelContext& ctx);
Status relu(KernelContext& ctx);
Status gelu(KernelContext& ctx);
Status gelu_tanh(KernelContext& ctx);
Status tanh(KernelContext& ctx);
Status sigmoid(KernelContext& ctx);
Status relu_grad(KernelContext& ctx);
Status gelu_grad(KernelContext& ctx);
Status gelu_tanh_grad(KernelContext& ctx);
Status tanh_grad(KernelContext& ctx);
Status sigmoid_grad(KernelContext& ctx);
Status add(KernelContext& ctx);
Status sub(KernelContext& ctx);
Status mul(KernelContext& ctx);
Status scale(KernelContext& ctx);
Status accumulate(KernelContext& ctx);
Status ones_like(KernelContext& ctx);
Status copy(KernelContext& ctx);  // identity, reshape
Status sparse_softmax_cross_entropy(KernelContext& ctx);
Status sparse_softmax_cross_entropy_grad(KernelContext& ctx);
Status accuracy(KernelContext& ctx);
Status embedding(KernelContext& ctx);
Status embedding_grad(KernelContext& ctx);
Status embedding_mask(KernelContext& ctx);
Status reduce_sum(KernelContext& ctx);
Status reduce_mean(KernelContext& ctx);
Status broadcast_like(KernelContext& ctx);
Status layer_norm(KernelContext& ctx);  // layer_norm_cuda.cc
Status layer_norm_grad(KernelContext& ctx);
Status dropout(KernelContext& ctx);  // dropout_cuda.cc
Status sum_squares(KernelContext& ctx);  // clip_ops_cuda.cc
Status add_n(KernelContext& ctx);
Status clip_factor(KernelContext& ctx);
Status softmax(KernelContext& ctx);
Status softmax_grad(KernelContext& ctx);
Status mse_loss(KernelContext& ctx);
Status mse_loss_grad(KernelContext& ctx);
Status transpose(KernelContext& ctx);
Status slice(KernelContext& ctx);
Status slice_grad(KernelContext& ctx);
Status concat(KernelContext& ctx);
Status sgd_update(KernelContext& ctx);
Status momentum_update(KernelContext& ctx);
Status adam_update(KernelContext& ctx);

}  // namespace rill::cuda_ops
