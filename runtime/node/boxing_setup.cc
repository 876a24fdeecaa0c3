#include "runtime/node/boxing_setup.h"

#include <algorithm>
#include <chrono>
#include <set>

#include <spdlog/spdlog.h>

#include "compiler/boxing_task.h"
#include "compiler/compiler.h"
#include "runtime/node/plan_reader.h"

namespace rill {

namespace {

// A device collective's rank on a GPU: its NCCL communicator, enqueueing on
// its device's compute stream.
class NcclRank final : public DeviceCommunicator {
 public:
  NcclRank(NcclComm* comm, CudaContext* cuda, std::chrono::milliseconds timeout)
      : comm_(comm), cuda_(cuda), timeout_(timeout) {}
  int rank() const override { return comm_->rank(); }
  int world() const override { return comm_->world(); }
  const char* backend() const override { return "nccl"; }
  Status all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                    std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) override {
    const std::string what = fmt::format("collective tag {} on cuda:{}", tag, cuda_->device());
    return comm_->all_reduce(inputs, outputs, elements, dtype, static_cast<int>(op), *cuda_, timeout_, what.c_str());
  }
  Status reduce_scatter(const void* input, void* output, size_t block, DType dtype, comm::ReduceOp op,
                        uint64_t tag) override {
    const std::string what = fmt::format("collective tag {} on cuda:{}", tag, cuda_->device());
    return comm_->reduce_scatter(input, output, block, dtype, static_cast<int>(op), *cuda_, timeout_, what.c_str());
  }
  Status all_gather(const void* input, void* output, size_t block, DType dtype, uint64_t tag) override {
    const std::string what = fmt::format("collective tag {} on cuda:{}", tag, cuda_->device());
    return comm_->all_gather(input, output, block, dtype, *cuda_, timeout_, what.c_str());
  }

 private:
  NcclComm* comm_;
  CudaContext* cuda_;
  std::chrono::milliseconds timeout_;
};

// A device collective's rank on a GPU that another rank of its communicator
// shares (agents on one machine's one GPU), which NCCL refuses: its pieces
// cross through host memory, summed by the node's LocalCollective. A copy
// from the device into pageable memory returns once done (after the work
// before it on the stream), and one back once it has read the host bytes,
// so the host buffers are free again when a call returns.
class StagedRank final : public DeviceCommunicator {
 public:
  StagedRank(DeviceCommunicator* host, CudaContext* cuda) : host_(host), cuda_(cuda) {}
  int rank() const override { return host_->rank(); }
  int world() const override { return host_->world(); }
  const char* backend() const override { return "staged"; }
  Status all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                    std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) override {
    const std::string what = fmt::format("collective tag {} on cuda:{} through host memory", tag, cuda_->device());
    staged_.resize(inputs.size());
    in_.resize(inputs.size());
    out_.resize(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      staged_[k].resize(elements[k] * dtype_size(dtype));
      RILL_RETURN_IF_ERROR(
          cuda_->copy(staged_[k].data(), inputs[k], staged_[k].size(), CopyKind::kDeviceToHost, what.c_str()));
      in_[k] = staged_[k].data();
      out_[k] = staged_[k].data();
    }
    RILL_RETURN_IF_ERROR(host_->all_reduce(in_, out_, elements, dtype, op, tag));
    for (size_t k = 0; k < outputs.size(); ++k)
      RILL_RETURN_IF_ERROR(
          cuda_->copy(outputs[k], staged_[k].data(), staged_[k].size(), CopyKind::kHostToDevice, what.c_str()));
    return {};
  }
  Status reduce_scatter(const void* input, void* output, size_t block, DType dtype, comm::ReduceOp op,
                        uint64_t tag) override {
    const size_t bytes = block * dtype_size(dtype);
    return one(input, bytes * static_cast<size_t>(world()), output, bytes, tag, [&](void* in, void* out) {
      return host_->reduce_scatter(in, out, block, dtype, op, tag);
    });
  }
  Status all_gather(const void* input, void* output, size_t block, DType dtype, uint64_t tag) override {
    const size_t bytes = block * dtype_size(dtype);
    return one(input, bytes, output, bytes * static_cast<size_t>(world()), tag,
               [&](void* in, void* out) { return host_->all_gather(in, out, block, dtype, tag); });
  }

 private:
  // input (in_bytes) to the host, `call` from one host buffer into another,
  // out_bytes of that back into output.
  template <typename Call>
  Status one(const void* input, size_t in_bytes, void* output, size_t out_bytes, uint64_t tag, Call&& call) {
    const std::string what = fmt::format("collective tag {} on cuda:{} through host memory", tag, cuda_->device());
    staged_.resize(2);
    staged_[0].resize(in_bytes);
    staged_[1].resize(out_bytes);
    RILL_RETURN_IF_ERROR(cuda_->copy(staged_[0].data(), input, in_bytes, CopyKind::kDeviceToHost, what.c_str()));
    RILL_RETURN_IF_ERROR(call(staged_[0].data(), staged_[1].data()));
    return cuda_->copy(output, staged_[1].data(), out_bytes, CopyKind::kHostToDevice, what.c_str());
  }

  DeviceCommunicator* host_;
  CudaContext* cuda_;
  std::vector<std::vector<std::byte>> staged_;  // pageable on purpose (see above); sized once
  std::vector<const void*> in_;
  std::vector<void*> out_;
};

}  // namespace

StatusOr<Body> BoxingSetup::body(const plan::Plan& plan, const plan::Task& task, std::byte* scratch,
                                 const CudaFor& cuda_for) {
  RILL_ASSIGN_OR_RETURN(compiler::BoxingTask work, compiler::boxing_task(plan, task));
  if (work.comm_group >= 0) return device_collective(plan, task, std::move(work), cuda_for);
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
  const bool gpu = ActorId::device_type(task.id()) == DeviceType::kCuda;
  const uint64_t tag = tag_base_ + 1 + task.boxing()->collective_tag();
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(stall_timeout_s_ * 1000));
  // This node's ranks (contiguous: a placement's ranks are node-major), and
  // the communicator's nodes.
  std::vector<int> devices, nodes;
  int first = -1;
  for (uint32_t r = 0; r < group.nodes()->size(); ++r) {
    const int n = group.nodes()->Get(r);
    if (nodes.empty() || nodes.back() != n) nodes.push_back(n);
    if (n != node) continue;
    if (first < 0) first = static_cast<int>(r);
    if (first + static_cast<int>(devices.size()) != static_cast<int>(r))
      return invalid_argument("task '{}': communicator {} has node {}'s ranks apart", name, work.comm_group, node);
    devices.push_back(group.devices()->Get(r));
  }
  const int index = task.boxing()->first_rank() - first;
  if (first < 0 || index < 0 || index >= static_cast<int>(devices.size()))
    return invalid_argument("task '{}': rank {} of communicator {} is not on node {}", name,
                            task.boxing()->first_rank(), work.comm_group, node);
  // NCCL's, unless two ranks share a GPU (NCCL refuses them): then staged
  // through the host, as on cpu devices.
  bool staged = false;
  if (gpu) {
    if (auto at = shared_gpu_.find(work.comm_group); at != shared_gpu_.end()) {
      staged = at->second;
    } else {
      RILL_ASSIGN_OR_RETURN(staged, shares_gpu(name, setup_tag(work.comm_group, 0), devices, nodes, cuda_for));
      shared_gpu_[work.comm_group] = staged;
      if (staged)
        spdlog::info("task '{}': communicator {} has ranks on one GPU, which NCCL refuses: its all-reduces cross "
                     "through host memory",
                     name, work.comm_group);
    }
  }
  DeviceCommunicator* rank = nullptr;
  if (gpu && !staged) {
    if (nccl_groups_.count(work.comm_group) == 0)
      RILL_RETURN_IF_ERROR(make_nccl(name, group, work.comm_group, setup_tag(work.comm_group, 1), first, devices,
                                     nodes));
    RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(task.device())));
    nccl_ranks_.push_back(std::make_unique<NcclRank>(
        nccl_groups_[work.comm_group][static_cast<size_t>(index)].get(), cuda, timeout));
    return Body(std::in_place_type<DeviceCollectiveBody>, nccl_ranks_.back().get(), work.call, std::move(work.tensors),
                static_cast<comm::ReduceOp>(work.reduce_op), tag, name);
  }
  auto& local = local_groups_[work.comm_group];
  if (!local) {
    comm::Collectives* across = nullptr;
    if (nodes.size() > 1) {
      RILL_ASSIGN_OR_RETURN(across, collectives_among(name, nodes));
    }
    local = std::make_unique<LocalCollective>(devices, first, static_cast<int>(group.nodes()->size()), across,
                                              timeout);
  }
  rank = local->rank(index);
  if (staged) {
    RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(task.device())));
    nccl_ranks_.push_back(std::make_unique<StagedRank>(rank, cuda));
    rank = nccl_ranks_.back().get();
  }
  return Body(std::in_place_type<DeviceCollectiveBody>, rank, work.call, std::move(work.tensors),
              static_cast<comm::ReduceOp>(work.reduce_op), tag, name);
}

StatusOr<bool> BoxingSetup::shares_gpu(const std::string& name, uint64_t tag, const std::vector<int>& devices,
                                       const std::vector<int>& nodes, const CudaFor& cuda_for) {
  // Every rank's GPU UUID, node by node (each node has as many ranks).
  std::vector<std::byte> mine;
  for (int device : devices) {
    RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(device)));
    RILL_ASSIGN_OR_RETURN(auto uuid, cuda->uuid("a device collective's GPU"));
    for (uint8_t b : uuid) mine.push_back(static_cast<std::byte>(b));
  }
  std::vector<std::byte> all = mine;
  if (nodes.size() > 1) {
    all.resize(mine.size() * nodes.size());
    RILL_ASSIGN_OR_RETURN(comm::Collectives * across, collectives_among(name, nodes));
    RILL_RETURN_IF_ERROR(across->all_gather(mine, all, tag).with_context(
        fmt::format("task '{}': gathering its communicator's GPUs", name)));
  }
  std::set<std::vector<std::byte>> seen;
  for (size_t at = 0; at + 16 <= all.size(); at += 16)
    if (!seen.insert(std::vector<std::byte>(all.begin() + static_cast<long>(at), all.begin() + static_cast<long>(at) + 16)).second)
      return true;
  return false;
}

Status BoxingSetup::make_nccl(const std::string& name, const plan::CommGroup& group, int index, uint64_t tag,
                              int first_rank, const std::vector<int>& devices, const std::vector<int>& nodes) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(stall_timeout_s_ * 1000));
  // The id: made by the communicator's first node, broadcast to the others
  // over the data plane (sealed where the cluster is keyed).
  NcclComm::Id id{};
  if (transport_ == nullptr || nodes.front() == transport_->rank()) {
    RILL_ASSIGN_OR_RETURN(id, nccl_unique_id());
  }
  if (nodes.size() > 1) {
    RILL_ASSIGN_OR_RETURN(comm::Collectives * across, collectives_among(name, nodes));
    RILL_RETURN_IF_ERROR(across->broadcast(id, 0, tag).with_context(
        fmt::format("task '{}': sending communicator {}'s NCCL id", name, index)));
  }
  std::vector<int> ranks;
  for (size_t i = 0; i < devices.size(); ++i) ranks.push_back(first_rank + static_cast<int>(i));
  auto comms = nccl_init(id, static_cast<int>(group.nodes()->size()), ranks, devices, timeout);
  if (!comms.ok())
    return comms.status().with_context(fmt::format("task '{}': making communicator {} (NCCL)", name, index));
  nccl_groups_[index] = std::move(*comms);
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
      comm::CollectiveOptions{.timeout = std::chrono::milliseconds(static_cast<int64_t>(stall_timeout_s_ * 1000))}));
  return collectives_.back().get();
}

}  // namespace rill
