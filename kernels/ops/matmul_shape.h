// How a matmul's operands lie in memory, worked out once from the shapes and
// the transpose flags, for the CPU kernel (OpenBLAS) and the CUDA kernel
// (cuBLAS) alike. A matmul is `batch` GEMMs C_i = op(A_i) op(B_i) of
// [m, k] x [k, n], row-major, the i-th operands `stride_*` elements apart
// (stride_b 0: one B shared by every batch). Pure; any thread.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace rill::math {

struct MatmulShape {
  bool transpose_a = false, transpose_b = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row-major leading dimensions
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// The layouts matmul accepts (infer has checked them):
//   fold_batch: a [..., K, M] and b [..., K, N] (transpose_a), every axis but
//     the last summed over: one GEMM of [prod(...) K, M]^T x [prod(...) K, N]
//     (a shared weight's gradient);
//   a [..., M, K], b [K, N]: b shared; without transpose_a the batch axes of
//     a fold into M, one GEMM of [prod(...) M, K] x [K, N];
//   a [..., M, K], b [..., K, N] with equal batch axes: one GEMM per batch.
inline MatmulShape matmul_shape(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b,
                                bool fold_batch = false) {
  MatmulShape s;
  s.transpose_a = transpose_a;
  s.transpose_b = transpose_b;
  const size_t ra = a.size(), rb = b.size();
  if (fold_batch) {
    s.m = a[ra - 1];
    s.n = b[rb - 1];
    s.k = 1;
    for (size_t i = 0; i + 1 < ra; ++i) s.k *= a[i];
    s.lda = s.m;
    s.ldb = s.n;
    s.ldc = s.n;
    return s;
  }
  const int64_t a_rows = a[ra - 2], a_cols = a[ra - 1];
  const int64_t b_rows = b[rb - 2], b_cols = b[rb - 1];
  s.m = transpose_a ? a_cols : a_rows;
  s.k = transpose_a ? a_rows : a_cols;
  s.n = transpose_b ? b_rows : b_cols;
  s.lda = a_cols;
  s.ldb = b_cols;
  s.ldc = s.n;
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < ra; ++i) batch *= a[i];
  if (rb == 2 && !transpose_a) {  // a shared weight: fold the batch into M
    s.m *= batch;
    return s;
  }
  s.batch = batch;
  s.stride_a = a_rows * a_cols;
  s.stride_b = rb == 2 ? 0 : b_rows * b_cols;
  s.stride_c = s.m * s.n;
  return s;
}

}  // namespace rill::math
