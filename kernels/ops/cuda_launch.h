// The CUDA kernels' launchers, defined in kernels/ops/*.cu. This header and
// those files hold device code and plain arguments only (pointers, sizes, a
// stream), nothing of Rill's host headers: nvcc compiles them, and the host
// side (kernels/ops/cuda_ops.cc and *_cuda.cc, compiled as C++) turns a KernelContext into
// these calls and their cudaError_t into a Status. Each launcher enqueues on
// `stream` and returns the launch's error without waiting.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace rill::cuda_launch {

enum class Activation { kRelu, kGelu, kTanh, kSigmoid, kGeluTanh };

// The mixture of experts (moe.cu): logits [groups, s, experts]; tokens
// [groups, s, d]; the experts' rows [experts, groups, capacity, d]; slots,
// gates and weights [groups, s, k] (weights, gates: nullptr for ones).
cudaError_t moe_route(const float* logits, float* gates, int32_t* slots, float* dropped, int64_t groups, int64_t s,
                      int64_t experts, int k, int64_t capacity, bool normalize, cudaStream_t stream);
cudaError_t moe_route_grad(const float* logits, const float* dgates, float* dlogits, int64_t rows, int64_t experts,
                           int k, bool normalize, cudaStream_t stream);
cudaError_t moe_dispatch(const float* x, const int32_t* slots, const float* weights, float* out, int64_t groups,
                         int64_t s, int64_t d, int k, int64_t experts, int64_t capacity, int64_t* bad,
                         cudaStream_t stream);
cudaError_t moe_combine(const float* y, const int32_t* slots, const float* gates, float* out, int64_t groups,
                        int64_t s, int64_t d, int k, int64_t experts, int64_t capacity, int64_t* bad,
                        cudaStream_t stream);
cudaError_t moe_gate_grad(const float* y, const int32_t* slots, const float* x, float* out, int64_t groups, int64_t s,
                          int64_t d, int k, int64_t experts, int64_t capacity, int64_t* bad, cudaStream_t stream);
// The router's auxiliary losses [groups] and their gradients (moe_losses.cc).
cudaError_t moe_balance_loss(const float* logits, float* out, int64_t groups, int64_t s, int64_t e,
                             cudaStream_t stream);
cudaError_t moe_balance_loss_grad(const float* logits, const float* dloss, float* dlogits, int64_t groups, int64_t s,
                                  int64_t e, cudaStream_t stream);
cudaError_t moe_z_loss(const float* logits, float* out, int64_t groups, int64_t s, int64_t e, cudaStream_t stream);
cudaError_t moe_z_loss_grad(const float* logits, const float* dloss, float* dlogits, int64_t groups, int64_t s,
                            int64_t e, cudaStream_t stream);
// Two parts of one attention joined by their log-sum-exps
// (attention_ring.cu): y parts [rows, d], lse parts [rows]; y and lse may
// be the second part's.
cudaError_t attention_merge(const float* ya, const float* la, const float* yb, const float* lb, float* y, float* lse,
                            int64_t rows, int64_t d, cudaStream_t stream);
enum class Binary { kAdd, kSub, kMul };

cudaError_t activation(Activation act, const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t activation_grad(Activation act, const float* t, const float* dy, float* dx, int64_t n,
                            cudaStream_t stream);
// y = gelu_tanh(x + b[i % n]) over `size` elements; its gradient dx.
cudaError_t bias_gelu_tanh(const float* x, const float* b, float* y, int64_t size, int64_t n, cudaStream_t stream);
cudaError_t bias_gelu_tanh_grad(const float* x, const float* b, const float* dy, float* dx, int64_t size, int64_t n,
                                cudaStream_t stream);
// b_stride 1: b shaped like a; 0: b is a scalar.
cudaError_t binary(Binary op, const float* a, const float* b, int64_t b_stride, float* y, int64_t n,
                   cudaStream_t stream);
// y[i] = x[i] + bias[(i / inner) % channels]
cudaError_t bias_add(const float* x, const float* bias, float* y, int64_t n, int64_t channels, int64_t inner,
                     cudaStream_t stream);
cudaError_t scale(const float* x, float* y, float s, int64_t n, cudaStream_t stream);
// y = x * s when `first`, else y += x * s (gradient accumulation).
cudaError_t accumulate(const float* x, float* y, float s, bool first, int64_t n, cudaStream_t stream);
cudaError_t fill(float* y, float value, int64_t n, cudaStream_t stream);
// Every element of y = `bits`, elements of 2 or 4 bytes (a value's pattern
// in any dtype).
cudaError_t fill_bits(void* y, uint32_t bits, int element_bytes, int64_t n, cudaStream_t stream);
// y = x converted, n elements, each a float type: the conversions of
// base/half.h, the same bits as the CPU's.
enum class FloatType { kF32, kBF16, kF16 };
cudaError_t cast(const void* x, FloatType from, void* y, FloatType to, int64_t n, cudaStream_t stream);

// One thread per row of `cols` classes. A label outside [0, cols) sets
// *bad_label to 1 + its row (the first such row wins) and gives NaN.
cudaError_t softmax_cross_entropy(const float* logits, const int32_t* labels, float* loss, int64_t rows, int64_t cols,
                                  int64_t* bad_label, cudaStream_t stream);
cudaError_t softmax_cross_entropy_grad(const float* logits, const int32_t* labels, const float* dloss, float* dlogits,
                                       int64_t rows, int64_t cols, int64_t* bad_label, cudaStream_t stream);
// out[i, :] = table[ids[i] - row_offset, :] for n ids, zeros for ids of
// rows outside the table (a block at row_offset of total_rows); an id
// outside [0, total_rows) sets *bad_id to 1 + its position (the first wins)
// and gives NaN.
cudaError_t embedding(const int32_t* ids, const float* table, float* out, int64_t n, int64_t rows, int64_t dim,
                      int64_t total_rows, int64_t row_offset, int64_t* bad_id, cudaStream_t stream);
// dtable = 0, then dtable[ids[i] - row_offset, :] += dout[i, :] for ids in
// the block (atomic adds: the order of a row's sums varies).
cudaError_t embedding_grad(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t rows, int64_t dim,
                           int64_t total_rows, int64_t row_offset, int64_t* bad_id, cudaStream_t stream);
// out[i, :] = x[i, :] for ids in the block's `rows` rows, else zeros.
cudaError_t embedding_mask(const int32_t* ids, const float* x, float* out, int64_t n, int64_t rows, int64_t dim,
                           int64_t total_rows, int64_t row_offset, int64_t* bad_id, cudaStream_t stream);
// out[0] = correct rows / logical_rows.
cudaError_t accuracy(const float* logits, const int32_t* labels, float* out, int64_t rows, int64_t cols,
                     int64_t logical_rows, int64_t* bad_label, cudaStream_t stream);

// A reduction's axes as runs of merged axes (see kernels/ops/axis_runs.h),
// with the strides the kernels need.
inline constexpr int kMaxRuns = 16;
struct ReduceRuns {
  int count = 0;
  int64_t size[kMaxRuns];
  int64_t big_stride[kMaxRuns];    // in the unreduced tensor
  int64_t small_stride[kMaxRuns];  // in the reduced tensor; 0 for reduced runs
  bool reduced[kMaxRuns];
};
// y[s] = scale * sum of x over the reduced runs (summed in double); n_out outputs.
cudaError_t reduce(const ReduceRuns& runs, const float* x, float* y, int64_t n_out, int64_t reduced_count,
                   float scale, bool empty, cudaStream_t stream);
// dx[i] = dy[small index of i] * scale over n elements of the unreduced shape.
cudaError_t broadcast_like(const ReduceRuns& runs, const float* dy, float* dx, int64_t n, float scale,
                           cudaStream_t stream);

// Softmax of scale * x over rows of `cols` (causal: row r sees columns
// 0..r % cols, the rest 0), and its gradient scale * y * (dy - sum(dy * y)).
cudaError_t softmax(const float* x, float* y, int64_t rows, int64_t cols, bool causal, float scale,
                    cudaStream_t stream);
cudaError_t softmax_grad(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, float scale,
                         cudaStream_t stream);
// layer_norm over rows of `cols`: y, and each row's mean and rstd; its
// gradient dx, and dgamma and dbeta summed over the rows.
cudaError_t layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, cudaStream_t stream);
cudaError_t layer_norm_grad(const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma,
                            float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols, cudaStream_t stream);
// attention over `heads` stacks (the leading axes) of q [t, d] and k, v
// [s, d] (d <= kAttentionMaxHead), never holding a [t, s] matrix: y and each
// row's log-sum-exp; its gradient dq, dk, dv from y, lse and dy.
inline constexpr int kAttentionMaxHead = 128;
cudaError_t attention(const float* q, const float* k, const float* v, float* y, float* lse, int64_t heads, int64_t t,
                      int64_t s, int d, float scale, bool causal, cudaStream_t stream);
cudaError_t attention_grad(const float* q, const float* k, const float* v, const float* y, const float* lse,
                           const float* dy, float* dq, float* dk, float* dv, int64_t heads, int64_t t, int64_t s, int d,
                           float scale, bool causal, cudaStream_t stream);
// dropout over a piece of `rank` axes (extent) at `offset` in a logical
// tensor of `logical` (kMaxBoxRank axes at most): y = x * scale where
// dropout_math::keep(key, first + the element's logical place, threshold),
// else 0.
struct DropoutPlace {
  int rank = 0;
  int64_t extent[8];
  int64_t offset[8];
  int64_t logical_stride[8];
};
cudaError_t dropout(const float* x, float* y, int64_t n, const DropoutPlace& place, uint64_t key, uint64_t first,
                    uint32_t threshold, float scale, cudaStream_t stream);
// out[0] = the sum of x's squares (in double, over at most max_blocks blocks
// whose partial sums go to `partials`, then summed in order); clip_factor
// from that total.
cudaError_t sum_squares(const float* x, float* out, int64_t n, double* partials, int max_blocks,
                        cudaStream_t stream);
cudaError_t clip_factor(const float* total, float* factor, float* norm, double max_norm, cudaStream_t stream);
// The loss_scale ops (loss_scale_math.h); loss_scale_update sets *flag to
// -(step + 1) when the scale falls below 1 (the first such step wins).
cudaError_t loss_scale_value(const float* state, float* scale, int exponent, cudaStream_t stream);
cudaError_t loss_scale_check(const float* total, const float* state, float* unscale, float* unscaled_total,
                             int32_t* gate, float* skipped, int exponent, int64_t step, cudaStream_t stream);
cudaError_t loss_scale_update(float* state, const float* total, int exponent, int64_t window, int64_t step,
                              int64_t* flag, cudaStream_t stream);
// out[0] = factor * sum((p - t)^2) (summed in double); dp = factor * (p - t).
cudaError_t mse(const float* p, const float* t, float* out, int64_t n, float factor, cudaStream_t stream);
cudaError_t mse_grad(const float* p, const float* t, const float* dloss, float* dp, int64_t n, float factor,
                     cudaStream_t stream);

// Copies a box of `element_bytes` (2 or 4) elements: element i of the box (row-major over
// `extent`) goes from src[src_offset + sum idx_d src_stride_d] to
// dst[dst_offset + sum idx_d dst_stride_d]. Serves transpose, slice,
// slice_grad and concat.
inline constexpr int kMaxBoxRank = 8;
struct Box {
  int rank = 0;
  int64_t extent[kMaxBoxRank];
  int64_t src_stride[kMaxBoxRank];
  int64_t dst_stride[kMaxBoxRank];
  int64_t src_offset = 0, dst_offset = 0;
};
cudaError_t copy_box(const Box& box, const void* src, void* dst, int element_bytes, cudaStream_t stream);

// The updates. `gate`: null, or an i32 in device memory (loss scaling,
// loss_scale_check): 0 skips the update, else it is the update's number t
// for Adam's bias corrections (lr then the step's rate, undivided).
cudaError_t sgd(float* w, const float* g, const int32_t* gate, int64_t n, double lr, double decay,
                cudaStream_t stream);
cudaError_t momentum(float* w, const float* g, float* v, const int32_t* gate, int64_t n, double lr, double decay,
                     double mu, cudaStream_t stream);
struct AdamScalars {
  double lr, step_size, beta1, beta2, correction2_sqrt, eps, decay, shrink;
};
cudaError_t adam(float* w, const float* g, float* m, float* v, const int32_t* gate, int64_t n, const AdamScalars& s,
                 cudaStream_t stream);

}  // namespace rill::cuda_launch
