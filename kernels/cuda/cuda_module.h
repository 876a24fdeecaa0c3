// The CUDA module (librill_cuda.so): the one place Rill links CUDA. A
// process loads it with dlopen when it first asks for a GPU
// (kernels/cuda/cuda_loader.cc) and reaches it through the table
// rill_cuda_module() returns; until then, and in a process that never asks,
// no CUDA library is mapped. Built from the same sources and compiler as the
// program, so C++ types cross the boundary as they are.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "base/status.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/nccl_comm.h"
#include "kernels/cuda/shared_gpu.h"
#include "kernels/op.h"

namespace rill {

// What both sides must agree on: the table's layout and the sizes of the
// types that cross (a module left from another build differs in them).
constexpr uint64_t cuda_module_abi() {
  return (uint64_t{11} << 56) ^ (uint64_t{sizeof(Status)} << 40) ^ (uint64_t{sizeof(KernelContext)} << 24) ^
         (uint64_t{sizeof(TensorView)} << 12) ^ uint64_t{sizeof(Attrs)};
}

struct CudaModule {
  uint64_t abi = cuda_module_abi();  // the loader refuses another
  int (*device_count)() = nullptr;
  StatusOr<std::unique_ptr<CudaContext>> (*create_context)(int device, bool allow_tf32) = nullptr;
  int64_t (*synchronizes)() = nullptr;
  int64_t (*graph_replays)() = nullptr;
  int64_t (*device_bytes_peak)() = nullptr;
  // Null in a module built without NCCL.
  StatusOr<NcclComm::Id> (*nccl_unique_id)() = nullptr;
  StatusOr<std::vector<std::unique_ptr<NcclComm>>> (*nccl_init)(const NcclComm::Id& id, int world,
                                                                std::span<const int> ranks,
                                                                std::span<const int> devices,
                                                                std::chrono::milliseconds timeout,
                                                                const std::atomic<bool>* cancelled) = nullptr;
  void (*nccl_abort)(std::span<NcclComm* const> comms) = nullptr;
  // Ranks sharing one GPU (shared_gpu.h).
  StatusOr<SharedBuffer> (*shared_allocate)(int device, size_t bytes) = nullptr;
  void (*shared_free)(int device, void* data) = nullptr;
  StatusOr<void*> (*shared_open)(int device, const IpcHandle& handle) = nullptr;
  void (*shared_close)(int device, void* mapped) = nullptr;
  Status (*shared_reduce)(CudaContext& cuda, std::span<const void* const> sources, void* dst, size_t elements,
                          DType dtype, int op, const char* what) = nullptr;
};

}  // namespace rill

// The module's one exported symbol.
extern "C" const rill::CudaModule* rill_cuda_module();
