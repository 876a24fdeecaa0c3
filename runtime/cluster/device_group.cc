#include "runtime/cluster/device_group.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "runtime/cluster/env.h"
#include "runtime/node/gpu_rank.h"
#include "runtime/node/local_collective.h"

namespace rill {
namespace {

// The set-up's host collectives: tags far above any a program would pick.
constexpr uint64_t kGpusTag = ~uint64_t{0} - 1;
constexpr uint64_t kIdTag = ~uint64_t{0} - 2;

// RILL_DEVICE: "cpu" (or unset) is -1; "cuda" or "cuda:N" is N (0 by default).
StatusOr<int> device_of_environment() {
  const char* value = std::getenv("RILL_DEVICE");
  const std::string device = value == nullptr ? "" : value;
  if (device.empty() || device == "cpu") return -1;
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() <= 8 &&
      std::all_of(device.begin() + 5, device.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::stoi(device.substr(5));
  return invalid_argument("RILL_DEVICE={} (environment): expected cpu, cuda or cuda:N", device);
}

}  // namespace

DeviceGroup::~DeviceGroup() {
  // NCCL's communicators go first (an abort never waits for a peer), then
  // the ranks over them, then the context whose stream they used.
  nccl_.clear();
  gpu_.reset();
  local_.reset();
  if (cuda_) (void)cuda_->synchronize("closing a program's device collectives");
}

StatusOr<std::unique_ptr<DeviceGroup>> make_device_group(std::chrono::milliseconds timeout) {
  std::unique_ptr<DeviceGroup> g(new DeviceGroup());
  RILL_ASSIGN_OR_RETURN(g->host_, env::communicator(timeout));
  comm::Collectives& host = *g->host_.collectives;
  const int rank = host.rank(), world = host.world();
  comm::Collectives* across = world > 1 ? &host : nullptr;
  RILL_ASSIGN_OR_RETURN(const int device, device_of_environment());
  if (device < 0) {  // cpu: host memory, one rank a process
    g->local_ = std::make_unique<LocalCollective>(std::vector<int>{0}, rank, world, across, timeout);
    g->communicator_ = g->local_->rank(0);
    return g;
  }
  RILL_ASSIGN_OR_RETURN(g->cuda_, CudaContext::create(device));
  // Every process's GPU and whether it has NCCL, so all choose alike.
  RILL_ASSIGN_OR_RETURN(const auto uuid, g->cuda_->uuid("a program's device collectives"));
  constexpr size_t kEach = 17;
  std::vector<std::byte> mine(kEach), all(kEach * static_cast<size_t>(world));
  std::memcpy(mine.data(), uuid.data(), 16);
  mine[16] = std::byte{nccl_available() ? uint8_t{1} : uint8_t{0}};
  if (across != nullptr) {
    RILL_RETURN_IF_ERROR(host.all_gather(mine, all, kGpusTag).with_context("gathering the processes' GPUs"));
  } else {
    all = mine;
  }
  std::vector<std::array<std::byte, 16>> gpus(static_cast<size_t>(world));
  bool nccl = true;
  for (size_t r = 0; r < gpus.size(); ++r) {
    std::memcpy(gpus[r].data(), all.data() + r * kEach, 16);
    nccl = nccl && all[r * kEach + 16] == std::byte{1};
  }
  std::sort(gpus.begin(), gpus.end());
  const bool distinct = std::unique(gpus.begin(), gpus.end()) == gpus.end();
  g->gpu_ = std::make_unique<GpuRank>(rank, world, g->cuda_.get(), timeout);
  g->communicator_ = g->gpu_.get();
  if (!distinct || !nccl) {
    if (rank == 0)
      spdlog::info("device collectives of {} processes: {}: they cross through host memory", world,
                   nccl ? "processes share a GPU, which NCCL refuses" : "a process has no NCCL");
    g->local_ = std::make_unique<LocalCollective>(std::vector<int>{device}, rank, world, across, timeout);
    g->gpu_->use_staged(g->local_->rank(0));
    return g;
  }
  NcclComm::Id id{};
  if (rank == 0) {
    RILL_ASSIGN_OR_RETURN(id, nccl_unique_id());
  }
  if (across != nullptr)
    RILL_RETURN_IF_ERROR(host.broadcast(id, 0, kIdTag).with_context("sending the NCCL id from rank 0"));
  const int ranks[] = {rank}, devices[] = {device};
  RILL_ASSIGN_OR_RETURN(g->nccl_, nccl_init(id, world, ranks, devices, timeout));
  g->gpu_->use_nccl(g->nccl_.front().get());
  return g;
}

}  // namespace rill
