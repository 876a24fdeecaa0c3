// GpuRank: a device collective's rank on a GPU (train.nccl on cuda
// devices). Made when the node builds its actors, joined to its
// communicator when the run starts (BoxingSetup::start: every node has
// built and opened the run's tags by then): NCCL's; where every rank of the
// communicator is on this one GPU (agents on one machine's one GPU, which
// NCCL refuses), a SharedGpuRank working in device memory; where only some
// share a GPU (or mapping the others' memory failed), the node's
// LocalCollective with each piece copied through host memory: the copies to the host waited for (CUDA promises no more than
// that a copy into pageable memory "might" be synchronous), a copy back
// done with the host bytes once it returns, so the host buffers are free
// again when a staged call returns. Its thread only, but for use_nccl /
// use_staged before the run.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actor/device_collective_body.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/nccl_comm.h"

namespace rill {

class GpuRank final : public DeviceCommunicator {
 public:
  GpuRank(int rank, int world, CudaContext* cuda, std::chrono::milliseconds timeout)
      : rank_(rank), world_(world), cuda_(cuda), timeout_(timeout) {}
  void use_nccl(NcclComm* comm) { nccl_ = comm; }
  void use_staged(DeviceCommunicator* host) { host_ = host; }
  // Ranks all on this GPU, in device memory (runtime/node/shared_gpu_rank.h).
  void use_shared(DeviceCommunicator* shared) { shared_ = shared; }
  CudaContext* cuda() const { return cuda_; }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  const char* backend() const override {
    return nccl_ != nullptr ? "nccl" : shared_ != nullptr ? "shared" : host_ != nullptr ? "staged" : "unset";
  }
  bool meets_on_host() const override { return nccl_ == nullptr; }
  Status all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                    std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) override;
  Status reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                        comm::ReduceOp op, uint64_t tag) override;
  Status all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                    uint64_t tag) override;
  Status all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                    std::span<const size_t> recv_counts, DType dtype, uint64_t tag) override;
  // Device memory, grown to the largest asked for and kept (outside the
  // node's memory plan); copies on the device's stream.
  StatusOr<void*> scratch(size_t bytes) override;
  Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                   size_t rows) override {
    return cuda_->copy_rows(dst, dst_pitch, src, src_pitch, width, rows, CopyKind::kDeviceToDevice,
                            "packing a device collective's blocks");
  }
  ~GpuRank() override {
    if (scratch_ != nullptr) cuda_->release(scratch_);
  }

 private:
  // What a call is, for errors ("collective tag 7 on cuda:0"): made on a
  // tag's first call and kept, so an act allocates nothing.
  const char* what(uint64_t tag);
  Status unset(uint64_t tag);
  // Staged: input (in_bytes) to the host, `call` from one host buffer into
  // another, out_bytes of that back into output.
  template <typename Call>
  Status staged(const void* input, size_t in_bytes, void* output, size_t out_bytes, uint64_t tag, Call&& call);

  const int rank_, world_;
  CudaContext* cuda_;
  const std::chrono::milliseconds timeout_;
  NcclComm* nccl_ = nullptr;  // one of the three, from the start
  DeviceCommunicator* shared_ = nullptr;
  DeviceCommunicator* host_ = nullptr;
  // Pageable on purpose (see above), grown to the largest call and kept:
  // an all-reduce's tensors, and a reduce-scatter's or all-gather's two ends.
  std::vector<std::vector<std::byte>> staged_;
  std::vector<std::byte> one_in_, one_out_;
  std::vector<const void*> in_;
  std::vector<void*> out_;
  std::map<uint64_t, std::string> whats_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace rill
