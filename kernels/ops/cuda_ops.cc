// The host side of the CUDA kernels: each op's KernelContext turned into a
// launch of its device code (kernels/ops/*.cu) or a cuBLAS call on the
// context's stream, and every CUDA or cuBLAS result into a Status naming the
// call and the op. Nothing here waits for the device.
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/ops/op_params.h"

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_status.h"
#include <cmath>
#include <cstring>

#include "kernels/ops/attr_read.h"
#include "kernels/ops/axis_runs.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/adam_step.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/matmul_shape.h"
#include "kernels/ops/zigzag_math.h"

namespace rill::cuda_ops {
namespace {

using cuda_launch::Activation;

cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.cuda->stream()); }
cublasHandle_t cublas_of(const KernelContext& ctx) { return static_cast<cublasHandle_t>(ctx.cuda->cublas()); }
using cuda_launch::Binary;

Status launched(cudaError_t error, const char* op) { return cuda_status(error, "kernel launch", op); }

template <Activation kAct>
Status unary(KernelContext& ctx, const char* op) {
  return launched(cuda_launch::activation(kAct, ctx.inputs[0].f32(), ctx.outputs[0].f32(), ctx.outputs[0].size(),
                                          stream_of(ctx)),
                  op);
}

template <Activation kAct>
Status unary_grad(KernelContext& ctx, const char* op) {
  return launched(cuda_launch::activation_grad(kAct, ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(),
                                               ctx.outputs[0].size(), stream_of(ctx)),
                  op);
}

template <Binary kOp>
Status binary(KernelContext& ctx, const char* op) {
  // x1 either has x0's shape or is a scalar read at index 0.
  const int64_t stride = ctx.inputs[1].shape == ctx.inputs[0].shape ? 1 : 0;
  return launched(cuda_launch::binary(kOp, ctx.inputs[0].f32(), ctx.inputs[1].f32(), stride, ctx.outputs[0].f32(),
                                      ctx.outputs[0].size(), stream_of(ctx)),
                  op);
}

cuda_launch::ReduceRuns device_runs(const math::AxisRuns& a) {
  static_assert(cuda_launch::kMaxRuns >= math::kMaxRank);
  cuda_launch::ReduceRuns r;
  r.count = a.count;
  int64_t stride = 1;
  for (int i = a.count - 1; i >= 0; --i) {
    r.size[i] = a.size[i];
    r.reduced[i] = a.reduced[i];
    r.small_stride[i] = a.small_stride[i];
    r.big_stride[i] = stride;
    stride *= a.size[i];
  }
  return r;
}

template <bool kMean>
Status reduce(KernelContext& ctx, const char* op) {
  const TensorView& x = ctx.inputs[0];
  const ReduceParams& p = params_of<ReduceParams>(ctx);
  const cuda_launch::ReduceRuns runs = device_runs(math::axis_runs(x.shape, p.axes));
  int64_t reduced_count = 1;
  for (int r = 0; r < runs.count; ++r)
    if (runs.reduced[r]) reduced_count *= runs.size[r];
  float scale = 1.0f;
  if (kMean) {
    const int64_t count = math::logical_count(ctx.logical_inputs[0], p.axes);
    scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  }
  return launched(cuda_launch::reduce(runs, x.f32(), ctx.outputs[0].f32(), ctx.outputs[0].size(), reduced_count,
                                      scale, x.size() == 0, stream_of(ctx)),
                  op);
}

Status check_update_views(const KernelContext& ctx, size_t num_state, const char* op) {
  const int64_t n = ctx.inputs[0].size();
  bool ok = ctx.inputs[1].size() == n && ctx.state.size() == num_state &&
            (ctx.inputs.size() == 2 || (ctx.inputs[2].dtype == DType::kI32 && ctx.inputs[2].size() == 1));
  for (const TensorView& s : ctx.state) ok = ok && s.size() == n;
  if (!ok)
    return internal_error("{}: variable {} with gradient {} and {} state tensor(s) (want {})", op,
                          shape_string(ctx.inputs[0].shape), shape_string(ctx.inputs[1].shape), ctx.state.size(),
                          num_state);
  return {};
}

float mse_mean_factor(const KernelContext& ctx) {
  if (!params_of<MseParams>(ctx).mean) return 1.0f;
  const int64_t count = num_elements(ctx.logical_inputs[0]);
  return count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
}

// A box over `extent`, read from `src` at `src_origin` and written to `dst`
// at `dst_origin`, both row-major.
cuda_launch::Box box_between(const Shape& extent, const Shape& src, const std::array<int64_t, kMaxKernelRank>& src_origin,
                             const Shape& dst, const std::array<int64_t, kMaxKernelRank>& dst_origin) {
  cuda_launch::Box box;
  box.rank = static_cast<int>(extent.size());
  const auto src_strides = row_major_strides(src), dst_strides = row_major_strides(dst);
  for (int d = 0; d < box.rank; ++d) {
    box.extent[d] = extent[d];
    box.src_stride[d] = src_strides[d];
    box.dst_stride[d] = dst_strides[d];
    box.src_offset += src_origin[d] * src_strides[d];
    box.dst_offset += dst_origin[d] * dst_strides[d];
  }
  return box;
}

Status copy_box(KernelContext& ctx, const cuda_launch::Box& box, const void* src, void* dst, const char* op) {
  return launched(cuda_launch::copy_box(box, src, dst, static_cast<int>(dtype_size(ctx.outputs[0].dtype)),
                                        stream_of(ctx)),
                  op);
}

// Runs `gemm` (16-bit inputs) with the handle in cuBLAS's default math,
// restored after. With allow_tf32 off the handle is in pedantic math, so
// that f32 products are plain f32. cuBLAS's header says that mode stands
// for the _PEDANTIC compute types only in calls naming a cudaDataType as
// their compute type; these name CUBLAS_COMPUTE_32F, which takes 16-bit
// inputs on tensor cores. Default math all the same, so that the f32
// setting never decides them. The mode is the handle's host state, read at
// each call; a context's handle is its own thread's.
template <typename Gemm>
Status in_default_math(cublasHandle_t handle, Gemm&& gemm) {
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
  RILL_RETURN_IF_ERROR(cublas_status(cublasGetMathMode(handle, &mode), "cublasGetMathMode", "op 'matmul'"));
  const bool pedantic = (mode & 0xf) == CUBLAS_PEDANTIC_MATH;
  if (pedantic)
    RILL_RETURN_IF_ERROR(
        cublas_status(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", "op 'matmul'"));
  Status made = gemm();
  if (pedantic) {
    Status restored = cublas_status(cublasSetMathMode(handle, mode), "cublasSetMathMode", "op 'matmul'");
    if (made.ok()) made = restored;
  }
  return made;
}

}  // namespace

// Rill's tensors are row-major and cuBLAS is column-major, so C = op(A) op(B)
// is computed as C^T = op(B)^T op(A)^T: a row-major buffer read as
// column-major is exactly the transpose.
RILL_CUDA_KERNEL(matmul) {
  const MatmulParams& p = params_of<MatmulParams>(ctx);
  const bool ta = p.transpose_a, tb = p.transpose_b;
  const TensorView& a = ctx.inputs[0];
  const TensorView& b = ctx.inputs[1];
  TensorView& c = ctx.outputs[0];
  const math::MatmulShape s =
      math::matmul_shape(a.shape, b.shape, ta, tb, p.fold_batch);
  if (c.size() == 0) return {};
  // Accumulating over micro-batches (as the CPU kernel): scaled by 1/K',
  // added to C after the first.
  const int64_t micro_batches = p.micro_batches;
  const bool add = micro_batches > 1 && ctx.micro > 0;
  if (s.k == 0)  // an empty split piece along K contributes zeros
    return add ? Status{}
               : cuda_status(cudaMemsetAsync(c.data, 0, c.bytes(), stream_of(ctx)), "cudaMemsetAsync", "op 'matmul'");
  const float alpha = 1.0f / static_cast<float>(micro_batches), beta = add ? 1.0f : 0.0f;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  if (a.dtype != DType::kF32) {
    // 16-bit inputs on tensor cores, f32 accumulation and output.
    const cudaDataType_t in = a.dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
    return in_default_math(cublas_of(ctx), [&] {
      if (s.batch == 1)
        return cublas_status(cublasGemmEx(cublas_of(ctx), op_b, op_a, n, m, k, &alpha, b.data, in,
                                          static_cast<int>(s.ldb), a.data, in, static_cast<int>(s.lda), &beta, c.data,
                                          CUDA_R_32F, static_cast<int>(s.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                             "cublasGemmEx", "op 'matmul'");
      return cublas_status(
          cublasGemmStridedBatchedEx(cublas_of(ctx), op_b, op_a, n, m, k, &alpha, b.data, in, static_cast<int>(s.ldb),
                                     s.stride_b, a.data, in, static_cast<int>(s.lda), s.stride_a, &beta, c.data,
                                     CUDA_R_32F, static_cast<int>(s.ldc), s.stride_c, static_cast<int>(s.batch),
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx", "op 'matmul'");
    });
  }
  if (s.batch == 1)
    return cublas_status(cublasSgemm(cublas_of(ctx), op_b, op_a, n, m, k, &alpha, b.f32(), static_cast<int>(s.ldb),
                                     a.f32(), static_cast<int>(s.lda), &beta, c.f32(), static_cast<int>(s.ldc)),
                         "cublasSgemm", "op 'matmul'");
  return cublas_status(cublasSgemmStridedBatched(cublas_of(ctx), op_b, op_a, n, m, k, &alpha, b.f32(),
                                                 static_cast<int>(s.ldb), s.stride_b, a.f32(), static_cast<int>(s.lda),
                                                 s.stride_a, &beta, c.f32(), static_cast<int>(s.ldc), s.stride_c,
                                                 static_cast<int>(s.batch)),
                       "cublasSgemmStridedBatched", "op 'matmul'");
}

RILL_CUDA_KERNEL(bias_add) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& bias = ctx.inputs[1];
  const math::BiasLayout layout =
      math::bias_layout(params_of<BiasAddParams>(ctx).axis_for(x.shape, bias.shape), x.shape, bias.shape);
  return launched(cuda_launch::bias_add(x.f32(), bias.f32(), ctx.outputs[0].f32(), x.size(), layout.channels,
                                        layout.inner, stream_of(ctx)),
                  "op 'bias_add'");
}

RILL_CUDA_KERNEL(relu) { return unary<Activation::kRelu>(ctx, "op 'relu'"); }
RILL_CUDA_KERNEL(gelu) { return unary<Activation::kGelu>(ctx, "op 'gelu'"); }
RILL_CUDA_KERNEL(gelu_tanh) { return unary<Activation::kGeluTanh>(ctx, "op 'gelu_tanh'"); }
RILL_CUDA_KERNEL(tanh) { return unary<Activation::kTanh>(ctx, "op 'tanh'"); }
RILL_CUDA_KERNEL(sigmoid) { return unary<Activation::kSigmoid>(ctx, "op 'sigmoid'"); }
RILL_CUDA_KERNEL(relu_grad) { return unary_grad<Activation::kRelu>(ctx, "op 'relu_grad'"); }
RILL_CUDA_KERNEL(gelu_grad) { return unary_grad<Activation::kGelu>(ctx, "op 'gelu_grad'"); }
RILL_CUDA_KERNEL(gelu_tanh_grad) { return unary_grad<Activation::kGeluTanh>(ctx, "op 'gelu_tanh_grad'"); }
RILL_CUDA_KERNEL(tanh_grad) { return unary_grad<Activation::kTanh>(ctx, "op 'tanh_grad'"); }
RILL_CUDA_KERNEL(sigmoid_grad) { return unary_grad<Activation::kSigmoid>(ctx, "op 'sigmoid_grad'"); }
RILL_CUDA_KERNEL(add) { return binary<Binary::kAdd>(ctx, "op 'add'"); }
RILL_CUDA_KERNEL(sub) { return binary<Binary::kSub>(ctx, "op 'sub'"); }
RILL_CUDA_KERNEL(mul) { return binary<Binary::kMul>(ctx, "op 'mul'"); }

RILL_CUDA_KERNEL(scale) {
  const float s = static_cast<float>(params_of<ScaleParams>(ctx).scale);
  return launched(
      cuda_launch::scale(ctx.inputs[0].f32(), ctx.outputs[0].f32(), s, ctx.outputs[0].size(), stream_of(ctx)),
      "op 'scale'");
}

RILL_CUDA_KERNEL(accumulate) {
  const float s = 1.0f / static_cast<float>(params_of<AccumulateParams>(ctx).micro_batches);
  return launched(cuda_launch::accumulate(ctx.inputs[0].f32(), ctx.outputs[0].f32(), s, ctx.micro == 0,
                                          ctx.outputs[0].size(), stream_of(ctx)),
                  "op 'accumulate'");
}

// 1 in the output's dtype: its bit pattern, written as the host makes it.
RILL_CUDA_KERNEL(ones_like) {
  const TensorView& y = ctx.outputs[0];
  const uint32_t one = visit_dtype(y.dtype, [&]<typename T>(std::type_identity<T>) {
    const T value = element_from<T>(1.0);
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof value);
    return bits;
  });
  return launched(cuda_launch::fill_bits(y.data, one, static_cast<int>(dtype_size(y.dtype)), y.size(), stream_of(ctx)),
                  "op 'ones_like'");
}

RILL_CUDA_KERNEL(copy) {
  const TensorView& in = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  if (in.bytes() != out.bytes())
    return internal_error("copy of {} into {}: sizes differ", shape_string(in.shape), shape_string(out.shape));
  if (in.data == out.data || in.bytes() == 0) return {};
  return cuda_status(cudaMemcpyAsync(out.data, in.data, in.bytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)),
                     "cudaMemcpyAsync", "op 'identity' or 'reshape'");
}

RILL_CUDA_KERNEL(sparse_softmax_cross_entropy) {
  const TensorView& logits = ctx.inputs[0];
  return launched(cuda_launch::softmax_cross_entropy(logits.f32(), ctx.inputs[1].i32(), ctx.outputs[0].f32(),
                                                     ctx.inputs[1].size(), logits.shape.back(), ctx.cuda->bad_label(),
                                                     stream_of(ctx)),
                  "op 'sparse_softmax_cross_entropy'");
}

RILL_CUDA_KERNEL(sparse_softmax_cross_entropy_grad) {
  const TensorView& logits = ctx.inputs[0];
  return launched(cuda_launch::softmax_cross_entropy_grad(logits.f32(), ctx.inputs[1].i32(), ctx.inputs[2].f32(),
                                                          ctx.outputs[0].f32(), ctx.inputs[1].size(), logits.shape.back(),
                                                          ctx.cuda->bad_label(), stream_of(ctx)),
                  "op 'sparse_softmax_cross_entropy_grad'");
}

// A block of a larger table: its first row and the whole table's rows
// (checked by the op's shape inference); a whole table by default.
std::pair<int64_t, int64_t> table_rows(const KernelContext& ctx, int64_t rows) {
  const EmbeddingParams& p = params_of<EmbeddingParams>(ctx);
  return {p.total_for(rows), p.row_offset};
}

RILL_CUDA_KERNEL(embedding) {
  const TensorView& table = ctx.inputs[1];
  const auto [total, offset] = table_rows(ctx, table.shape[0]);
  return launched(cuda_launch::embedding(ctx.inputs[0].i32(), table.f32(), ctx.outputs[0].f32(), ctx.inputs[0].size(),
                                         table.shape[0], table.shape[1], total, offset, ctx.cuda->bad_label(),
                                         stream_of(ctx)),
                  "op 'embedding'");
}

RILL_CUDA_KERNEL(embedding_grad) {
  const TensorView& dtable = ctx.outputs[0];
  const auto [total, offset] = table_rows(ctx, dtable.shape[0]);
  return launched(cuda_launch::embedding_grad(ctx.inputs[0].i32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(),
                                              ctx.inputs[0].size(), dtable.shape[0], dtable.shape[1], total, offset,
                                              ctx.cuda->bad_label(), stream_of(ctx)),
                  "op 'embedding_grad'");
}

RILL_CUDA_KERNEL(embedding_mask) {
  const int64_t rows = params_of<EmbeddingParams>(ctx).rows;
  const auto [total, offset] = table_rows(ctx, rows);
  return launched(cuda_launch::embedding_mask(ctx.inputs[0].i32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(),
                                              ctx.inputs[0].size(), rows, ctx.inputs[1].shape.back(), total, offset,
                                              ctx.cuda->bad_label(), stream_of(ctx)),
                  "op 'embedding_mask'");
}

RILL_CUDA_KERNEL(accuracy) {
  const TensorView& logits = ctx.inputs[0];
  return launched(cuda_launch::accuracy(logits.f32(), ctx.inputs[1].i32(), ctx.outputs[0].f32(), ctx.inputs[1].size(),
                                        logits.shape.back(), num_elements(ctx.logical_inputs[1]), ctx.cuda->bad_label(),
                                        stream_of(ctx)),
                  "op 'accuracy'");
}

RILL_CUDA_KERNEL(reduce_sum) { return reduce<false>(ctx, "op 'reduce_sum'"); }
RILL_CUDA_KERNEL(reduce_mean) { return reduce<true>(ctx, "op 'reduce_mean'"); }

RILL_CUDA_KERNEL(broadcast_like) {
  TensorView& out = ctx.outputs[0];
  float scale = 1.0f;
  const ReduceParams& p = params_of<ReduceParams>(ctx);
  if (p.mean) {
    const int64_t count = math::logical_count(ctx.logical_inputs[1], p.axes);
    scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  }
  return launched(cuda_launch::broadcast_like(device_runs(math::axis_runs(out.shape, p.axes)), ctx.inputs[0].f32(),
                                              out.f32(), out.size(), scale, stream_of(ctx)),
                  "op 'broadcast_like'");
}

// Loss scaling's gate (input 2, device memory), or null.
const int32_t* gate_of(const KernelContext& ctx) { return ctx.inputs.size() > 2 ? ctx.inputs[2].i32() : nullptr; }

RILL_CUDA_KERNEL(sgd_update) {
  RILL_RETURN_IF_ERROR(check_update_views(ctx, 0, "op 'sgd_update'"));
  const SgdParams& p = params_of<SgdParams>(ctx);
  return launched(cuda_launch::sgd(ctx.inputs[0].f32(), ctx.inputs[1].f32(), gate_of(ctx), ctx.inputs[0].size(),
                                   lr_at(p.lr, ctx.step), p.weight_decay, stream_of(ctx)),
                  "op 'sgd_update'");
}

RILL_CUDA_KERNEL(momentum_update) {
  RILL_RETURN_IF_ERROR(check_update_views(ctx, 1, "op 'momentum_update'"));
  const SgdParams& p = params_of<SgdParams>(ctx);
  return launched(cuda_launch::momentum(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.state[0].f32(), gate_of(ctx),
                                        ctx.inputs[0].size(), lr_at(p.lr, ctx.step), p.weight_decay, p.momentum,
                                        stream_of(ctx)),
                  "op 'momentum_update'");
}

// With a gate, the kernel makes t's corrections from it on the device.
RILL_CUDA_KERNEL(adam_update) {
  RILL_RETURN_IF_ERROR(check_update_views(ctx, 2, "op 'adam_update'"));
  const AdamStep s = adam_step(params_of<AdamParams>(ctx), ctx.step, ctx.step + 1);
  const cuda_launch::AdamScalars scalars{s.lr,   s.step_size, s.beta1, s.beta2, s.correction2_sqrt,
                                         s.eps, s.decay,     s.shrink};
  return launched(cuda_launch::adam(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.state[0].f32(), ctx.state[1].f32(),
                                    gate_of(ctx), ctx.inputs[0].size(), scalars, stream_of(ctx)),
                  "op 'adam_update'");
}

RILL_CUDA_KERNEL(softmax) {
  const TensorView& x = ctx.inputs[0];
  const int64_t cols = x.shape.back();
  if (cols == 0) return {};
  const SoftmaxParams& p = params_of<SoftmaxParams>(ctx);
  const bool causal = p.causal;
  const float scale = p.scale;
  if (causal && (x.shape[x.shape.size() - 2] != cols || query_offset(ctx, x.shape.size() - 2) != 0))
    return invalid_argument("op 'softmax': a causal mask over a piece of the queries (context parallelism) runs on "
                            "CPUs only so far; scores {}", shape_string(x.shape));
  return launched(
      cuda_launch::softmax(x.f32(), ctx.outputs[0].f32(), x.size() / cols, cols, causal, scale, stream_of(ctx)),
      "op 'softmax'");
}

RILL_CUDA_KERNEL(softmax_grad) {
  const TensorView& y = ctx.inputs[0];
  const int64_t cols = y.shape.back();
  if (cols == 0) return {};
  const float scale = params_of<SoftmaxParams>(ctx).scale;
  return launched(cuda_launch::softmax_grad(y.f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(), y.size() / cols, cols,
                                            scale, stream_of(ctx)),
                  "op 'softmax_grad'");
}

RILL_CUDA_KERNEL(mse_loss) {
  return launched(cuda_launch::mse(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(), ctx.inputs[0].size(),
                                   mse_mean_factor(ctx), stream_of(ctx)),
                  "op 'mse_loss'");
}

RILL_CUDA_KERNEL(mse_loss_grad) {
  return launched(cuda_launch::mse_grad(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
                                        ctx.outputs[0].f32(), ctx.inputs[0].size(), mse_mean_factor(ctx),
                                        stream_of(ctx)),
                  "op 'mse_loss_grad'");
}

// Walks the output in order; a step along output axis j moves by the input's
// stride of axis perm[j].
RILL_CUDA_KERNEL(transpose) {
  const TensorView& in = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  const std::vector<int64_t>* perm = &params_of<TransposeParams>(ctx).perm;
  const int rank = static_cast<int>(out.shape.size());
  if (perm == nullptr || static_cast<int>(perm->size()) != rank || in.shape.size() != out.shape.size() ||
      rank > kMaxKernelRank)
    return internal_error("op 'transpose' of {} into {}: attr 'perm' does not match", shape_string(in.shape),
                          shape_string(out.shape));
  const auto in_strides = row_major_strides(in.shape), out_strides = row_major_strides(out.shape);
  cuda_launch::Box box;
  box.rank = rank;
  for (int j = 0; j < rank; ++j) {
    box.extent[j] = out.shape[j];
    box.src_stride[j] = in_strides[(*perm)[j]];
    box.dst_stride[j] = out_strides[j];
  }
  return copy_box(ctx, box, in.data, out.data, "op 'transpose'");
}

RILL_CUDA_KERNEL(slice) {
  const TensorView& in = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  std::array<int64_t, kMaxKernelRank> origin{}, zero{};
  RILL_RETURN_IF_ERROR(box_origin(params_of<SliceParams>(ctx).starts, in.shape, out.shape, &origin));
  return copy_box(ctx, box_between(out.shape, in.shape, origin, out.shape, zero), in.data, out.data, "op 'slice'");
}

RILL_CUDA_KERNEL(slice_grad) {
  const TensorView& dy = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  std::array<int64_t, kMaxKernelRank> origin{}, zero{};
  RILL_RETURN_IF_ERROR(box_origin(params_of<SliceParams>(ctx).starts, out.shape, dy.shape, &origin));
  RILL_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(out.data, 0, out.bytes(), stream_of(ctx)), "cudaMemsetAsync",
                                   "op 'slice_grad'"));
  return copy_box(ctx, box_between(dy.shape, dy.shape, zero, out.shape, origin), dy.data, out.data, "op 'slice_grad'");
}

// Each input goes into its box of the output, one after another along the axis.
RILL_CUDA_KERNEL(concat) {
  const TensorView& out = ctx.outputs[0];
  int64_t axis = params_of<ConcatParams>(ctx).axis;
  if (axis < 0) axis += static_cast<int64_t>(out.shape.size());
  if (out.shape.size() > static_cast<size_t>(kMaxKernelRank) || axis < 0 || axis >= static_cast<int64_t>(out.shape.size()))
    return internal_error("op 'concat' into {}: attr 'axis' does not match", shape_string(out.shape));
  std::array<int64_t, kMaxKernelRank> origin{}, zero{};
  for (const TensorView& in : ctx.inputs) {
    if (in.size() > 0)
      RILL_RETURN_IF_ERROR(
          copy_box(ctx, box_between(in.shape, in.shape, zero, out.shape, origin), in.data, out.data, "op 'concat'"));
    origin[axis] += in.shape[axis];
  }
  return {};
}

// One copy a chunk, from its place into its slot of the zigzag order (or back).
RILL_CUDA_KERNEL(zigzag) {
  const TensorView& in = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  const ZigzagParams& p = params_of<ZigzagParams>(ctx);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  const int64_t axis = p.axis < 0 ? p.axis + rank : p.axis;
  if (axis < 0 || axis >= rank || rank > kMaxKernelRank || in.shape != out.shape)
    return internal_error("op 'zigzag' of {} into {} along axis {}", shape_string(in.shape), shape_string(out.shape),
                          p.axis);
  Status status;
  for_each_zigzag_chunk<std::array<int64_t, kMaxKernelRank>>(
      in.shape, static_cast<int>(axis), p.parts, p.inverse,
      [&](const auto& from, const auto& to, const Shape& extent) {
        if (status.ok() && num_elements(extent) > 0)
          status = copy_box(ctx, box_between(extent, in.shape, from, out.shape, to), in.data, out.data, "op 'zigzag'");
      });
  return status;
}

}  // namespace rill::cuda_ops
