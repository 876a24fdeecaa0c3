// The layout ops' one CUDA kernel: a box copy with arbitrary strides on both
// sides, one thread per element (transpose, slice, slice_grad, concat), of
// 2- or 4-byte elements.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

namespace {

template <typename T>
cudaError_t copy_box_of(const Box& box, const T* src, T* dst, cudaStream_t stream) {
  int64_t n = 1;
  for (int d = 0; d < box.rank; ++d) n *= box.extent[d];
  return for_each(n, stream, [=] __device__(int64_t i) {
    int64_t s = box.src_offset, t = box.dst_offset, rest = i;
    for (int d = box.rank - 1; d >= 0; --d) {
      const int64_t idx = rest % box.extent[d];
      rest /= box.extent[d];
      s += idx * box.src_stride[d];
      t += idx * box.dst_stride[d];
    }
    dst[t] = src[s];
  });
}

}  // namespace

cudaError_t copy_box(const Box& box, const void* src, void* dst, int element_bytes, cudaStream_t stream) {
  switch (element_bytes) {
    case 2: return copy_box_of(box, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), stream);
    case 4: return copy_box_of(box, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace rill::cuda_launch
