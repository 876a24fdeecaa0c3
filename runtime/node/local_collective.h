// LocalCollective: the host's side of a device collective's communicator
// (train.nccl on cpu devices) on one node. The node's ranks (its device
// threads) meet in the process: the last to arrive sums their inputs in rank
// order, all-reduces that sum with the other nodes' (the host's collectives
// among the communicator's nodes, one call per meeting, a bucket's tensors
// packed in one buffer) and writes it to every rank's outputs; a
// reduce-scatter sums likewise and reduce-scatters the node's blocks across
// nodes; an all-gather packs the node's blocks and gathers every node's
// (blocks of any size, every rank's given by each call); an all-to-all
// copies the blocks among the node's ranks and sends the others' to their
// nodes, one message a node.
// Those are a host boxing's sums in a host boxing's order (the node's pieces
// in order, then across nodes), so a job gives the same bits either way; it
// is how the plan NCCL runs is exercised where there is no GPU.
//
// A rank waits for its node's others until the deadline (the run's stall
// timeout), then fails naming the devices it waited for, and so does every
// later call; once all are in, until the call is done (whose collective has
// its own deadline). cancel() wakes every rank still waiting for others. Threads: one call per rank at a time, from that
// rank's thread; cancel() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actor/device_collective_body.h"
#include "base/collective_scratch.h"
#include "base/mutex.h"
#include "comm/collectives.h"

namespace rill {

class LocalCollective {
 public:
  // `devices`: the node's ranks' devices, in rank order; `across`: the
  // collectives among the communicator's nodes (null: it is on one node),
  // which outlive this object. A rank that waits past `timeout` while
  // `liveness` changed (RunOptions::liveness: a device waiting for its
  // checkpoint disk) waits on for another.
  LocalCollective(std::vector<int> devices, int first_rank, int world, comm::Collectives* across,
                  std::chrono::milliseconds timeout, comm::Liveness liveness = {});
  ~LocalCollective();
  LocalCollective(const LocalCollective&) = delete;
  LocalCollective& operator=(const LocalCollective&) = delete;

  int first_rank() const { return first_rank_; }
  int local_ranks() const { return static_cast<int>(devices_.size()); }
  // Local rank `local`'s communicator (owned here).
  DeviceCommunicator* rank(int local);
  // Wakes every rank waiting for the others (not one whose call is under
  // way: that ends by its collective), and fails every later call.
  void cancel(const std::string& reason);
  // How many ranks wait in a call now (tests).
  int arrived();

 private:
  class Rank;
  struct Arrival {
    CollectiveCall call = CollectiveCall::kAllReduce;
    std::span<const void* const> inputs;
    std::span<void* const> outputs;
    std::span<const size_t> elements;  // an all-reduce's tensors'; else every rank's block (all-to-all: sent)
    std::span<const size_t> received;  // an all-to-all's blocks received, from every rank
    DType dtype = DType::kF32;
    comm::ReduceOp op = comm::ReduceOp::kSum;
    uint64_t tag = 0;
  };
  Status meet(int local, const Arrival& arrival);
  // The last to arrive: the call of `sums_`, across nodes, into every output.
  Status combine();
  Status all_reduce();
  Status reduce_scatter();
  Status all_gather();
  Status all_to_all();
  template <typename T>
  void sum_ranks(size_t k, T* dst, size_t n) const;

  const std::vector<int> devices_;
  const int first_rank_, world_;
  comm::Collectives* across_;
  const std::chrono::milliseconds timeout_;
  const comm::Liveness liveness_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  Mutex mu_;
  CondVar cv_;
  std::vector<Arrival> arrivals_ GUARDED_BY(mu_);
  std::vector<bool> present_ GUARDED_BY(mu_);
  int arrived_ GUARDED_BY(mu_) = 0;
  bool working_ GUARDED_BY(mu_) = false;  // all are in; the last one sums
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  Status result_ GUARDED_BY(mu_);
  Status cancelled_ GUARDED_BY(mu_);
  // The last to arrive's, while working (the others wait): the arrivals it
  // sums, copied under the lock, and a bucket's sum, packed.
  std::vector<Arrival> sums_;
  std::vector<std::byte> packed_;  // a bucket's or a reduce-scatter's sum, or an all-gather's whole
  std::vector<std::byte> node_;    // this node's blocks (reduce-scatter, all-gather)
  std::vector<size_t> counts_;     // each node's elements (reduce-scatter) or bytes (all-gather, all-to-all's sent)
  std::vector<size_t> received_;   // an all-to-all's bytes from each node
};

}  // namespace rill
