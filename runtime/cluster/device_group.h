// A launched program's collectives on its device's memory (rill launch
// programs, as torch.distributed's NCCL backend): the DeviceCommunicator a
// job's device collectives use (actor/device_collective_body.h), on the
// process's device. RILL_DEVICE says which (rill launch sets it: "cuda:0",
// the one GPU CUDA_VISIBLE_DEVICES leaves the process, or "cpu"):
//   cuda  NCCL's communicator among the processes (the id made by rank 0 and
//         sent over the host's collectives), calls enqueued on the process's
//         CUDA stream (DeviceGroup::cuda(): synchronize before reading a
//         result on the host); where processes share a GPU (NCCL refuses
//         them) or one has no NCCL, every process stages through host
//         memory alike (logged);
//   cpu   host memory, the host's collectives.
// The processes meet as env::communicator's do (MASTER_ADDR, MASTER_PORT).
// One thread at a time; tags as the host collectives' (a call's tag the same
// on every rank, distinct from the calls around it).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "actor/device_collective_body.h"
#include "comm/rendezvous.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/nccl_comm.h"

namespace rill {

class GpuRank;
class LocalCollective;

class DeviceGroup {
 public:
  ~DeviceGroup();
  DeviceGroup(const DeviceGroup&) = delete;
  DeviceGroup& operator=(const DeviceGroup&) = delete;

  // "nccl", "staged" (GPU memory through the host) or "host" (cpu).
  const char* backend() const { return communicator().backend(); }
  DeviceCommunicator& communicator() const { return *communicator_; }
  // The GPU's context (its stream, memory, copies), or null on cpu.
  CudaContext* cuda() const { return cuda_.get(); }
  comm::Collectives& host() const { return *host_.collectives; }

 private:
  friend StatusOr<std::unique_ptr<DeviceGroup>> make_device_group(std::chrono::milliseconds timeout);
  DeviceGroup() = default;
  comm::Communicator host_;
  std::unique_ptr<CudaContext> cuda_;
  std::vector<std::unique_ptr<NcclComm>> nccl_;
  std::unique_ptr<LocalCollective> local_;
  std::unique_ptr<GpuRank> gpu_;
  DeviceCommunicator* communicator_ = nullptr;
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
