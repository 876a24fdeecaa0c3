// BoxingSetup: builds the body of each boxing task of a node's plan, its
// work as compiler/boxing_task.h makes it from the conf (checked against the
// task's regsts): conversions between SBPs (one task per node, per device,
// or a bucket) and moves between placements (region copies). A boxing that crosses nodes gets its
// own Collectives among the nodes of its peers (its placement's), over a
// GroupTransport when those are not the whole cluster. A device collective
// (train.nccl) is its device's rank of its communicator, made with the
// communicator's first task here: on cpu devices the node's LocalCollective
// of it, with Collectives among the communicator's nodes; on cuda devices
// NCCL's (the id made by the communicator's first node and broadcast to the
// others over the data plane, this node's ranks made in one NCCL group), or,
// where two ranks share a GPU (which NCCL refuses), the LocalCollective's
// with each rank's pieces copied through host memory. It
// owns those, so it must outlive the actors built with its bodies. One per
// NodeRun; the build thread only, but cancel() from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "actor/actor.h"
#include "base/status.h"
#include "comm/collectives.h"
#include "comm/group_transport.h"
#include "compiler/boxing_task.h"
#include "kernels/cuda/nccl_comm.h"
#include "runtime/node/local_collective.h"
#include "compiler/plan_generated.h"

namespace rill {

class BoxingSetup {
 public:
  // `transport`: the data plane (null on one node); collectives time out
  // after `stall_timeout_s` and use tags from `tag_base` + 1.
  BoxingSetup(comm::Transport* transport, double stall_timeout_s, uint64_t tag_base)
      : transport_(transport), stall_timeout_s_(stall_timeout_s), tag_base_(tag_base) {}

  // The context of a GPU of this node (made on first use).
  using CudaFor = std::function<StatusOr<CudaContext*>(uint32_t device)>;
  // The body of boxing task `task` of `plan`, its scratch at `scratch` (the
  // node's memory plan; null: its own), or an error naming it.
  StatusOr<Body> body(const plan::Plan& plan, const plan::Task& task, std::byte* scratch, const CudaFor& cuda_for);
  // What its collectives' transports still read of the run's buffers, and
  // waiting (until `deadline`) for that to end.
  int64_t sends_in_flight() const {
    int64_t n = 0;
    for (const auto& c : collectives_) n += c->sends_in_flight();
    return n;
  }
  // Wakes the device collectives' ranks waiting for their node's others,
  // and ends their NCCL calls.
  void cancel(const std::string& reason) {
    for (const auto& [group, local] : local_groups_) local->cancel(reason);
    for (const auto& [group, comms] : nccl_groups_)
      for (const auto& comm : comms) comm->abort();
  }
  bool wait_sends(comm::Clock::time_point deadline) const {
    for (const auto& c : collectives_)
      if (!c->wait_sends(deadline).ok()) return false;
    return true;
  }

 private:
  // The collectives among the task's peers' nodes.
  StatusOr<comm::Collectives*> collectives_for(const std::string& name, const plan::BoxingConf& conf);
  // Among `nodes` (ascending, this one among them), over a group of the
  // transport when they are not all of it.
  StatusOr<comm::Collectives*> collectives_among(const std::string& name, const std::vector<int>& nodes);
  StatusOr<Body> device_collective(const plan::Plan& plan, const plan::Task& task, compiler::BoxingTask work,
                                   const CudaFor& cuda_for);
  // The tags of a communicator's set-up exchanges (step 0: its GPUs, 1: its
  // NCCL id), apart from every collective's (tag_base + 1 + its ordinal).
  uint64_t setup_tag(int group, int step) const {
    return tag_base_ + (uint64_t{1} << 19) + 2 * static_cast<uint64_t>(group) + static_cast<uint64_t>(step);
  }
  // Whether two ranks of a communicator (this node's on `devices`, the
  // others' gathered from `nodes`) are on one GPU, by the GPUs' UUIDs: every
  // node gets the same answer.
  StatusOr<bool> shares_gpu(const std::string& name, uint64_t tag, const std::vector<int>& devices,
                            const std::vector<int>& nodes, const CudaFor& cuda_for);
  // This node's NCCL communicators of communicator `group` (its ranks
  // first_rank ... on `devices`), made with the other nodes of `nodes`.
  Status make_nccl(const std::string& name, const plan::CommGroup& group, int index, uint64_t tag, int first_rank,
                   const std::vector<int>& devices, const std::vector<int>& nodes);

  comm::Transport* transport_;
  double stall_timeout_s_;
  uint64_t tag_base_;
  std::vector<std::unique_ptr<comm::GroupTransport>> groups_;    // boxings on some of the nodes
  std::vector<std::unique_ptr<comm::Collectives>> collectives_;  // one per cross-node boxing task
  std::map<int, std::unique_ptr<LocalCollective>> local_groups_;  // by communicator: its ranks on this node
  std::map<int, std::vector<std::unique_ptr<NcclComm>>> nccl_groups_;   // by communicator: its ranks on this node
  std::vector<std::unique_ptr<DeviceCommunicator>> nccl_ranks_;        // the bodies' GPU ranks (NCCL's or staged)
  std::map<int, bool> shared_gpu_;  // by communicator: whether ranks share a GPU (then staged through the host)
};

}  // namespace rill
