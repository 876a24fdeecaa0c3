#include "runtime/node/boxing_setup.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

#include "comm/flight_record.h"
#include "compiler/boxing_task.h"
#include "compiler/compiler.h"
#include "kernels/cuda/shared_gpu.h"
#include "runtime/node/plan_reader.h"

namespace rill {

StatusOr<Body> BoxingSetup::body(const plan::Plan& plan, const plan::Task& task, std::byte* scratch,
                                 const CudaFor& cuda_for) {
  RILL_ASSIGN_OR_RETURN(compiler::BoxingTask work, compiler::boxing_task(plan, task));
  if (work.comm_group >= 0) return device_collective(plan, task, std::move(work), cuda_for);
  if (work.own) {  // from its own piece, on its device
    CudaContext* cuda = nullptr;
    if (ActorId::device_type(task.id()) == DeviceType::kCuda) {
      RILL_ASSIGN_OR_RETURN(cuda, cuda_for(ActorId::device(task.id())));
    }
    compiler::BoxingTask::OwnPiece& own = *work.own;
    return Body(std::in_place_type<OwnPieceBody>, cuda, std::move(own.input), std::move(own.output), own.zero,
                own.copy, own.dtype, read_string(task.name()));
  }
  comm::Collectives* collectives = nullptr;
  if (work.exchanges) {
    RILL_ASSIGN_OR_RETURN(collectives, collectives_for(read_string(task.name()), *task.boxing()));
  }
  const uint64_t tag = tag_base_ + 1 + task.boxing()->collective_tag();
  return Body(std::in_place_type<BoxingBody>, std::move(work.plan), collectives, tag,
              static_cast<comm::ReduceOp>(work.reduce_op), scratch);
}

StatusOr<Body> BoxingSetup::device_collective(const plan::Plan& plan, const plan::Task& task,
                                               compiler::BoxingTask work, const CudaFor& cuda_for) {
  const std::string name = read_string(task.name());
  const plan::CommGroup& group = *plan.comm_groups()->Get(static_cast<uint32_t>(work.comm_group));
  const int node = task.node();
  const int world = static_cast<int>(group.nodes()->size());
  const uint64_t tag = tag_base_ + 1 + task.boxing()->collective_tag();
  // This node's ranks (contiguous: verify_plan holds a communicator's ranks
  // node-major), and the communicator's nodes.
  Communicator& c = [&]() -> Communicator& {
    MutexLock lock(mu_);
    return communicators_[work.comm_group];
  }();
  if (c.devices.empty()) {
    c.name = name;
    for (uint32_t r = 0; r < group.nodes()->size(); ++r) {
      const int n = group.nodes()->Get(r);
      if (c.nodes.empty() || c.nodes.back() != n) c.nodes.push_back(n);
      if (n != node) continue;
      if (c.first < 0) c.first = static_cast<int>(r);
      c.devices.push_back(group.devices()->Get(r));
    }
    if (group.calls() != nullptr)
      for (const plan::CommCall* call : *group.calls())
        c.largest_call = std::max(c.largest_call, static_cast<size_t>(std::max<int64_t>(call->bytes(), 0)));
  }
  const int index = task.boxing()->first_rank() - c.first;
  if (c.first < 0 || index < 0 || index >= static_cast<int>(c.devices.size()))
    return invalid_argument("task '{}': rank {} of communicator {} is not on node {}", name,
                            task.boxing()->first_rank(), work.comm_group, node);
  DeviceCommunicator* rank = nullptr;
  if (ActorId::device_type(task.id()) == DeviceType::kCuda) {
    // Joined to NCCL's communicator, or staged, when the run starts.
    if (c.gpu_ranks.empty()) {
      for (size_t i = 0; i < c.devices.size(); ++i) {
        RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(c.devices[i])));
        c.gpu_ranks.push_back(std::make_unique<GpuRank>(c.first + static_cast<int>(i), world, cuda, timeout()));
      }
    }
    rank = c.gpu_ranks[static_cast<size_t>(index)].get();
  } else {
    RILL_ASSIGN_OR_RETURN(LocalCollective * local, local_collective(work.comm_group, world));
    rank = local->rank(index);
  }
  return Body(std::in_place_type<DeviceCollectiveBody>, rank, work.call, std::move(work.tensors),
              std::move(work.blocks), std::move(work.received), static_cast<comm::ReduceOp>(work.reduce_op), tag,
              name);
}

StatusOr<LocalCollective*> BoxingSetup::local_collective(int group, int world) {
  Communicator& c = communicators_.at(group);  // made by device_collective()
  if (!c.local) {
    comm::Collectives* across = nullptr;
    if (c.nodes.size() > 1) {
      RILL_ASSIGN_OR_RETURN(across, collectives_among(c.name, c.nodes));
    }
    auto local = std::make_unique<LocalCollective>(c.devices, c.first, world, across, timeout(), liveness_);
    MutexLock lock(mu_);
    if (!cancelled_.empty()) local->cancel(cancelled_);
    c.local = std::move(local);
  }
  return c.local.get();
}

void BoxingSetup::cancel(const std::string& reason) {
  MutexLock lock(mu_);
  if (cancelled_.empty()) cancelled_ = reason.empty() ? std::string("cancelled") : reason;
  stop_ = true;
  std::vector<NcclComm*> nccl;
  for (const auto& [group, c] : communicators_) {
    if (c.local) c.local->cancel(reason);
    for (const auto& comm : c.nccl) nccl.push_back(comm.get());
  }
  nccl_abort(nccl);
}

void BoxingSetup::finish() {
  for (auto& [group, c] : communicators_)
    if (c.shared)
      if (Status closed = c.shared->close(setup_tag(group, 0)); !closed.ok())
        spdlog::warn("communicator {} ('{}'): {}", group, c.name, closed.to_string());
}

Status BoxingSetup::check_nccl() {
  MutexLock lock(mu_);
  for (const auto& [group, c] : communicators_)
    for (size_t i = 0; i < c.nccl.size(); ++i)
      if (Status s = c.nccl[i]->check(c.name.c_str()); !s.ok())  // named in full only when it failed
        return s.with_context(fmt::format("communicator {} ('{}'), rank {} on cuda:{}", group, c.name,
                                          c.first + static_cast<int>(i), c.devices[i]));
  return {};
}

StatusOr<comm::Collectives*> BoxingSetup::setup_collectives(Communicator& c) {
  if (c.setup == nullptr) {
    RILL_ASSIGN_OR_RETURN(c.setup, collectives_among(c.name, c.nodes));
  }
  return c.setup;
}

Status BoxingSetup::start() {
  // In communicator order on every node: the set-up exchanges of a node's
  // communicators never wait on each other in opposite orders.
  for (auto& [group, c] : communicators_) {
    if (c.gpu_ranks.empty()) continue;  // cpu devices: their LocalCollective needs no set-up
    if (stop_) {
      MutexLock lock(mu_);
      return Status(Code::kAborted, fmt::format("making communicator {} ('{}'): {}", group, c.name, cancelled_));
    }
    const int world = c.gpu_ranks.front()->world();
    // NCCL's, unless ranks share a GPU (NCCL refuses them): then in that
    // GPU's memory where all are on it, one a node (agents sharing a GPU),
    // else staged through the host, as on cpu devices.
    RILL_ASSIGN_OR_RETURN(const Gpus gpus, distinct_gpus(c, setup_tag(group, 0)));
    if (gpus.distinct == 1 && c.gpu_ranks.size() == 1 && c.nodes.size() > 1 && world <= kMaxSharedGpuRanks) {
      RILL_ASSIGN_OR_RETURN(const bool shared, share_gpu(group, c, world, setup_tag(group, 1)));
      if (shared) continue;
    }
    if (gpus.distinct < static_cast<size_t>(world) || !gpus.nccl) {
      // Where a node has no NCCL (a CUDA module built without it, a libnccl
      // too old), every node falls back alike.
      spdlog::info("communicator {} ('{}'): {}: its collectives cross through host memory", group, c.name,
                   gpus.nccl ? "ranks on one GPU, which NCCL refuses" : no_nccl_here("a node of it"));
      RILL_ASSIGN_OR_RETURN(LocalCollective * local, local_collective(group, world));
      for (size_t i = 0; i < c.gpu_ranks.size(); ++i) c.gpu_ranks[i]->use_staged(local->rank(static_cast<int>(i)));
      continue;
    }
    RILL_RETURN_IF_ERROR(make_nccl(group, c, world, setup_tag(group, 1)));
    for (size_t i = 0; i < c.gpu_ranks.size(); ++i) c.gpu_ranks[i]->use_nccl(c.nccl[i].get());
  }
  return {};
}

StatusOr<bool> BoxingSetup::share_gpu(int group, Communicator& c, int world, uint64_t tag) {
  RILL_ASSIGN_OR_RETURN(comm::Collectives * among, setup_collectives(c));
  auto shared = std::make_unique<SharedGpuRank>(c.first, world, c.gpu_ranks.front()->cuda(), among);
  RILL_ASSIGN_OR_RETURN(const bool mapped, shared->open(std::max<size_t>(c.largest_call, 1), tag));
  if (!mapped) {
    spdlog::warn("communicator {} ('{}'): its ranks share one GPU, but one could not map another's memory: its "
                 "collectives cross through host memory",
                 group, c.name);
    return false;
  }
  spdlog::info("communicator {} ('{}'): its {} ranks share one GPU (which NCCL refuses): its collectives work in "
               "that GPU's memory",
               group, c.name, world);
  c.gpu_ranks.front()->use_shared(shared.get());
  MutexLock lock(mu_);
  c.shared = std::move(shared);
  return true;
}

StatusOr<BoxingSetup::Gpus> BoxingSetup::distinct_gpus(Communicator& c, uint64_t tag) {
  // Every rank's GPU UUID, node by node (each node has as many ranks), then
  // whether the node has NCCL.
  std::vector<std::byte> mine;
  for (const auto& rank : c.gpu_ranks) {
    RILL_ASSIGN_OR_RETURN(auto uuid, rank->cuda()->uuid("a device collective's GPU"));
    for (uint8_t b : uuid) mine.push_back(static_cast<std::byte>(b));
  }
  mine.push_back(std::byte{nccl_available() ? uint8_t{1} : uint8_t{0}});
  std::vector<std::byte> all = mine;
  if (c.nodes.size() > 1) {
    all.resize(mine.size() * c.nodes.size());
    RILL_ASSIGN_OR_RETURN(comm::Collectives * across, setup_collectives(c));
    RILL_RETURN_IF_ERROR(across->all_gather(mine, all, tag).with_context(
        fmt::format("task '{}': gathering its communicator's GPUs", c.name)));
  }
  Gpus gpus{0, true};
  std::vector<std::array<std::byte, 16>> uuids;
  for (size_t at = 0; at < all.size(); at += mine.size()) {
    for (size_t r = 0; r < c.gpu_ranks.size(); ++r) std::memcpy(uuids.emplace_back().data(), all.data() + at + 16 * r, 16);
    gpus.nccl = gpus.nccl && all[at + mine.size() - 1] == std::byte{1};
  }
  std::sort(uuids.begin(), uuids.end());
  gpus.distinct = static_cast<size_t>(std::unique(uuids.begin(), uuids.end()) - uuids.begin());
  return gpus;
}

Status BoxingSetup::make_nccl(int group, Communicator& c, int world, uint64_t tag) {
  // The id: made by the communicator's first node (its rank 0's: verify_plan
  // holds ranks node-major), broadcast to the others over the data plane
  // (sealed where the cluster is keyed).
  NcclComm::Id id{};
  if (transport_ == nullptr || c.nodes.front() == transport_->rank()) {
    RILL_ASSIGN_OR_RETURN(id, nccl_unique_id());
  }
  if (c.nodes.size() > 1) {
    RILL_ASSIGN_OR_RETURN(comm::Collectives * across, setup_collectives(c));
    RILL_RETURN_IF_ERROR(across->broadcast(id, 0, tag).with_context(
        fmt::format("task '{}': sending communicator {}'s NCCL id", c.name, group)));
  }
  std::vector<int> ranks;
  for (size_t i = 0; i < c.devices.size(); ++i) ranks.push_back(c.first + static_cast<int>(i));
  auto comms = nccl_init(id, world, ranks, c.devices, timeout(), &stop_);
  if (!comms.ok())
    return comms.status().with_context(fmt::format("task '{}': making communicator {} (NCCL)", c.name, group));
  MutexLock lock(mu_);
  c.nccl = std::move(*comms);
  if (!cancelled_.empty()) {  // cancel() came while it was made: it missed these
    std::vector<NcclComm*> made;
    for (const auto& comm : c.nccl) made.push_back(comm.get());
    nccl_abort(made);
    return Status(Code::kAborted, fmt::format("making communicator {} ('{}'): {}", group, c.name, cancelled_));
  }
  return {};
}

StatusOr<comm::Collectives*> BoxingSetup::collectives_for(const std::string& name, const plan::BoxingConf& conf) {
  if (transport_ == nullptr)
    return invalid_argument("task '{}': boxing across {} nodes needs a transport", name, conf.num_nodes());
  // Among the nodes of its peers (its placement's), which need not be every
  // node of the cluster.
  std::vector<int> nodes;
  if (conf.peers() != nullptr)
    for (uint64_t peer : *conf.peers()) nodes.push_back(static_cast<int>(ActorId::node(peer)));
  if (nodes.empty() || static_cast<int>(nodes.size()) != conf.num_nodes() ||
      !std::is_sorted(nodes.begin(), nodes.end()) || std::adjacent_find(nodes.begin(), nodes.end()) != nodes.end())
    return invalid_argument("task '{}': boxing across {} nodes with peers on {} nodes ({})", name, conf.num_nodes(),
                            nodes.size(), fmt::join(nodes, ", "));
  return collectives_among(name, nodes);
}

StatusOr<comm::Collectives*> BoxingSetup::collectives_among(const std::string& name, const std::vector<int>& nodes) {
  if (transport_ == nullptr)
    return invalid_argument("task '{}': a collective across {} nodes needs a transport", name, nodes.size());
  comm::Transport* transport = transport_;
  if (nodes.back() >= transport->world())
    return invalid_argument("task '{}': boxing with node {}, but the cluster has {} nodes", name, nodes.back(),
                            transport->world());
  if (static_cast<int>(nodes.size()) != transport->world()) {
    groups_.push_back(std::make_unique<comm::GroupTransport>(*transport, nodes));
    if (!groups_.back()->member())
      return invalid_argument("task '{}': boxing among nodes {} runs on node {}", name, fmt::join(nodes, ", "),
                              transport->rank());
    transport = groups_.back().get();
  }
  collectives_.push_back(std::make_unique<comm::Collectives>(
      *transport,
      comm::CollectiveOptions{.timeout = std::chrono::milliseconds(static_cast<int64_t>(stall_timeout_s_ * 1000)),
                              .record = record_,
                              .caller = record_ ? record_->add_caller(name, nodes) : -1,
                              .liveness = liveness_}));
  return collectives_.back().get();
}

}  // namespace rill
