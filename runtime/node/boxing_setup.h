// BoxingSetup: builds the body of each boxing task of a node's plan, its
// work as compiler/boxing_task.h makes it from the conf (checked against the
// task's regsts): conversions between SBPs (one task per node, per device,
// or a bucket) and moves between placements (region copies). A boxing that
// crosses nodes gets its own Collectives among the nodes of its peers (its
// placement's), over a GroupTransport when those are not the whole cluster.
// A device collective (train.nccl) is its device's rank of its
// communicator: on cpu devices the node's LocalCollective of it, with
// Collectives among the communicator's nodes; on cuda devices a GpuRank,
// joined by start() (when every node has built and opened the run's tags)
// to NCCL's communicator (its id made by the communicator's first node and
// broadcast to the others over the data plane, this node's ranks made in
// one NCCL group), or, where ranks share a GPU (which NCCL refuses), to the
// others in that GPU's memory when all are on it (a SharedGpuRank), else
// to the LocalCollective through host memory. It owns those, so it must
// outlive the actors built with its bodies. One per NodeRun; the build
// thread only, but for cancel() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "actor/actor.h"
#include "base/mutex.h"
#include "base/status.h"
#include "comm/collectives.h"
#include "comm/group_transport.h"
#include "compiler/boxing_task.h"
#include "compiler/plan_generated.h"
#include "kernels/cuda/nccl_comm.h"
#include "runtime/node/gpu_rank.h"
#include "runtime/node/local_collective.h"
#include "runtime/node/shared_gpu_rank.h"

namespace rill {

class BoxingSetup {
 public:
  // `transport`: the data plane (null on one node); collectives time out
  // after `stall_timeout_s`, use tags from `tag_base` + 1 and record their
  // calls in `record` (the node's flight record; null: nowhere).
  // `liveness` (RunOptions::liveness) lets their waits go on past it.
  BoxingSetup(comm::Transport* transport, double stall_timeout_s, uint64_t tag_base,
              comm::FlightRecord* record = nullptr, comm::Liveness liveness = {})
      : transport_(transport),
        stall_timeout_s_(stall_timeout_s),
        tag_base_(tag_base),
        record_(record),
        liveness_(std::move(liveness)) {}

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
  // Joins the GPU ranks of device collectives to their communicators: the
  // set-up exchanges among nodes, once every node has built (the run's
  // start), before any act.
  Status start();
  // Wakes the device collectives' ranks waiting for their node's others,
  // and ends their NCCL calls, every communicator's at once (so no stream
  // waits on a peer that is gone); start() under way gives up, and what it
  // makes later is cancelled as it is made. Any thread.
  void cancel(const std::string& reason);
  // At the end of a run every node ran to its end: each rank sharing a GPU
  // lets go of the others' buffers and frees its own once all have
  // (SharedGpuRank::close). A rank that cannot meet the others keeps its
  // buffer (logged).
  void finish();
  // The first error NCCL met on one of this node's communicators since
  // (ncclCommGetAsyncError: a peer gone, a network failure) naming the
  // communicator, its first task and the node's devices; OK when none.
  // Any thread: the run thread polls it while the run goes.
  Status check_nccl();
  // Keeps (leaks) every buffer a collective may have handed the transport
  // without a copy: for a run ending with sends still in flight.
  void keep_buffers() {
    MutexLock lock(mu_);
    for (auto& c : collectives_) (void)c.release();
    for (auto& [group, c] : communicators_) {
      (void)c.local.release();
      for (auto& rank : c.gpu_ranks) (void)rank.release();
    }
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
  // A device collective's communicator: this node's ranks (the first's
  // rank, their devices) and the communicator's nodes, and what joins them.
  // `local` and `nccl` are set under mu_ (cancel() reads them from any
  // thread), the rest by the build thread before the run starts.
  struct Communicator {
    std::string name;  // its first task here, for errors
    int first = -1;
    std::vector<int> devices, nodes;
    std::unique_ptr<LocalCollective> local;           // cpu devices, or staged GPU ranks
    std::vector<std::unique_ptr<GpuRank>> gpu_ranks;  // cuda devices
    std::vector<std::unique_ptr<NcclComm>> nccl;      // their NCCL communicators
    std::unique_ptr<SharedGpuRank> shared;            // or its rank sharing one GPU with all the others
    size_t largest_call = 0;                          // bytes: its largest call's tensors
    comm::Collectives* setup = nullptr;               // the set-up's exchanges among its nodes (and a shared GPU's)
  };
  StatusOr<Body> device_collective(const plan::Plan& plan, const plan::Task& task, compiler::BoxingTask work,
                                   const CudaFor& cuda_for);
  StatusOr<LocalCollective*> local_collective(int group, int world);
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(stall_timeout_s_ * 1000));
  }
  // The tags of a communicator's set-up exchanges (step 0: its GPUs, 1: its
  // NCCL id), apart from every collective's (tag_base + 1 + its ordinal).
  uint64_t setup_tag(int group, int step) const {
    return tag_base_ + (uint64_t{1} << 19) + 2 * static_cast<uint64_t>(group) + static_cast<uint64_t>(step);
  }
  // How many GPUs communicator `c`'s ranks are on, by the GPUs' UUIDs
  // gathered from its nodes, and whether every one of its nodes has NCCL:
  // every node gets the same answer.
  struct Gpus {
    size_t distinct = 0;
    bool nccl = false;
  };
  StatusOr<Gpus> distinct_gpus(Communicator& c, uint64_t tag);
  // Joins `c`'s one rank here to the others on its GPU in device memory;
  // false (on every node alike) where a rank could not map another's memory.
  StatusOr<bool> share_gpu(int group, Communicator& c, int world, uint64_t tag);
  // This node's NCCL communicators of `c`, made with its other nodes.
  Status make_nccl(int group, Communicator& c, int world, uint64_t tag);

  // The set-up's collectives among `c`'s nodes (made on first use).
  StatusOr<comm::Collectives*> setup_collectives(Communicator& c);

  comm::Transport* transport_;
  double stall_timeout_s_;
  uint64_t tag_base_;
  comm::FlightRecord* record_;
  comm::Liveness liveness_;
  Mutex mu_;
  std::string cancelled_ GUARDED_BY(mu_);  // why, once cancelled
  std::atomic<bool> stop_{false};          // cancelled: a communicator being made gives up
  std::vector<std::unique_ptr<comm::GroupTransport>> groups_;    // boxings on some of the nodes
  std::vector<std::unique_ptr<comm::Collectives>> collectives_;  // one per cross-node boxing task
  std::map<int, Communicator> communicators_;  // by communicator (Plan.comm_groups)
};

}  // namespace rill
