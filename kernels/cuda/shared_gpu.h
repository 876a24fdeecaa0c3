// Device memory that ranks sharing one GPU read from each other, and the
// combination of such buffers on the GPU: the device side of train.nccl's
// communicators whose ranks are agents on one machine's one GPU (NCCL
// refuses two ranks on one GPU; runtime/node/shared_gpu_rank.h is the
// protocol). Between processes the memory travels as a CUDA IPC handle;
// within one process the pointer does. The header names no CUDA type; the
// work lives in the CUDA module (shared_gpu.cu), reached through its table.
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "base/status.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace rill {

using IpcHandle = std::array<std::byte, 64>;  // a cudaIpcMemHandle_t
// The most ranks shared_gpu_reduce combines in one pass.
inline constexpr int kMaxSharedGpuRanks = 8;

struct SharedBuffer {
  void* data = nullptr;
  IpcHandle handle{};  // what another process opens it by
};

// `bytes` of device memory on `device` (not cleared) that other processes may open.
StatusOr<SharedBuffer> shared_gpu_allocate(int device, size_t bytes);
void shared_gpu_free(int device, void* data);
// Another process's buffer, by its handle, mapped into this one.
StatusOr<void*> shared_gpu_open(int device, const IpcHandle& handle);
void shared_gpu_close(int device, void* mapped);
// dst[i] = sources[0][i] op sources[1][i] op ... (in that order: the host
// collectives' combination, 16-bit floats rounded once a step; op 0 sum, 1
// max, 2 min, 3 product, as comm::ReduceOp; at most kMaxSharedGpuRanks sources), `elements`
// elements of `dtype`, enqueued on `cuda`'s compute stream.
Status shared_gpu_reduce(CudaContext& cuda, std::span<const void* const> sources, void* dst, size_t elements,
                         DType dtype, int op, const char* what);

// The module's own (shared_gpu.cu), which the ones above reach through its
// table (cuda_module.h).
namespace shared_gpu {
StatusOr<SharedBuffer> allocate(int device, size_t bytes);
void free(int device, void* data);
StatusOr<void*> open(int device, const IpcHandle& handle);
void close(int device, void* mapped);
Status reduce(CudaContext& cuda, std::span<const void* const> sources, void* dst, size_t elements, DType dtype,
              int op, const char* what);
}  // namespace shared_gpu

}  // namespace rill
