// A launched program's collectives on its device's memory (rill launch
// programs, as torch.distributed's NCCL backend): comm/collectives.h's
// eleven, on buffers in the memory of the process's device. RILL_DEVICE
// says which (rill launch sets it: "cuda:0", the one GPU
// CUDA_VISIBLE_DEVICES leaves the process, or "cpu"):
//   nccl    on GPUs: NCCL's communicator among the processes (the id made
//           by rank 0 and sent over the host's collectives), every call
//           enqueued on the process's CUDA stream (cuda(): synchronize
//           before reading a result on the host; barrier() does);
//   staged  on GPUs that share one (NCCL refuses them) or where a process
//           has no NCCL: every process alike copies to the host, runs the
//           host's collective and copies back (each call complete when it
//           returns);
//   host    on cpu: the host's collectives on the buffers as they are.
// Blocks are equal: `elements` per rank (reduce_scatter's output,
// all_gather's and gather's input, scatter's output, all_to_all's block).
// Reductions: sum, max, min, product, average (of floats). The processes
// meet as env::communicator's do (MASTER_ADDR, MASTER_PORT). One thread at
// a time; tags as the host collectives' (a call's tag the same on every
// rank, distinct from the calls around it). Nothing waits past the deadline
// given (a call's NCCL hand-over, barrier()'s wait for the device, the
// destructor's): a peer gone fails the call, naming it.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/collectives.h"
#include "comm/rendezvous.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/nccl_comm.h"
#include "kernels/tensor.h"

namespace rill {

class DeviceGroup {
 public:
  ~DeviceGroup();
  DeviceGroup(const DeviceGroup&) = delete;
  DeviceGroup& operator=(const DeviceGroup&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  const char* backend() const { return nccl_ ? "nccl" : cuda_ ? "staged" : "host"; }
  // The GPU's context (its stream, memory, copies), or null on cpu.
  CudaContext* cuda() const { return cuda_.get(); }
  comm::Collectives& host() const { return *host_.collectives; }

  Status all_reduce(const void* input, void* output, size_t elements, DType dtype, comm::ReduceOp op, uint64_t tag);
  // output (root's) = the ranks' inputs combined; other ranks' output untouched.
  Status reduce(const void* input, void* output, size_t elements, DType dtype, comm::ReduceOp op, int root,
                uint64_t tag);
  // input: world() blocks; output: this rank's block of their combination.
  Status reduce_scatter(const void* input, void* output, size_t elements, DType dtype, comm::ReduceOp op,
                        uint64_t tag);
  Status all_gather(const void* input, void* output, size_t elements, DType dtype, uint64_t tag);
  // Every rank's buffer = root's.
  Status broadcast(void* buffer, size_t elements, DType dtype, int root, uint64_t tag);
  // Root's output = every rank's input in rank order; scatter: this rank's
  // output = block rank() of root's input.
  Status gather(const void* input, void* output, size_t elements, DType dtype, int root, uint64_t tag);
  Status scatter(const void* input, void* output, size_t elements, DType dtype, int root, uint64_t tag);
  // Block q of input to rank q, arriving as block rank() of its output.
  Status all_to_all(const void* input, void* output, size_t elements, DType dtype, uint64_t tag);
  Status send(const void* data, size_t elements, DType dtype, int to, uint64_t tag);
  Status recv(void* data, size_t elements, DType dtype, int from, uint64_t tag);
  // Returns once every rank has come, its device's work enqueued so far done.
  Status barrier(uint64_t tag);

 private:
  friend StatusOr<std::unique_ptr<DeviceGroup>> make_device_group(std::chrono::milliseconds timeout);
  DeviceGroup() = default;
  // `call(host_input, host_output)` on host memory: the buffers themselves
  // on cpu, else in_bytes of input copied to the host first and out_bytes
  // of the result copied back after.
  template <typename Call>
  Status on_host(const void* input, size_t in_bytes, void* output, size_t out_bytes, Call&& call);
  const char* what(const char* call);
  // Waits for the device's work enqueued so far, within the deadline: a
  // collective whose peer is gone (NCCL's error, or the deadline) aborts
  // the communicator and fails naming the call.
  Status drain(const char* call);
  Status check(DType dtype, comm::ReduceOp op, int peer, const char* call) const;

  comm::Communicator host_;
  std::unique_ptr<CudaContext> cuda_;
  std::vector<std::unique_ptr<NcclComm>> nccl_comms_;
  NcclComm* nccl_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::chrono::milliseconds timeout_{60000};
  std::vector<std::byte> staged_in_, staged_out_;
  std::string what_;
};

StatusOr<std::unique_ptr<DeviceGroup>> make_device_group(std::chrono::milliseconds timeout);

namespace env {
// This process's device collectives among the processes of its run (above).
inline StatusOr<std::unique_ptr<DeviceGroup>> device_communicator(
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return make_device_group(timeout);
}
}  // namespace env

}  // namespace rill
