// Replicator: one run's in-memory replica of a node's pieces (live
// membership, docs/FAULTS.md "When a node fails"). After every
// `replica_every`-th step, each node's checkpoint-writing pieces (one
// holder of each distinct piece over the cluster, so all nodes' together
// make the model whole) are copied at the step boundary, as a checkpoint's
// are, kept in the node's ReplicaStore and sent to the next node of the
// plan (its buddy; with `--replica-copies K`, the next K nodes, at once)
// over the data plane, on tags of their own, while training goes
// on; each node keeps what the K nodes before it sent. While one
// step's copy is on its way and the next waits to go, training waits (the
// checkpoint collector's bound: training slows to the link's pace instead
// of piling up copies). When a node is lost, a surviving buddy's replica
// and the survivors' own pieces at a step they all hold make the model
// whole (master_gather.cc): up to K nodes lost at once leave a copy of each.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "comm/transport.h"
#include "runtime/checkpoint/checkpoint_collector.h"
#include "runtime/cluster/memory_transfer.h"
#include "runtime/cluster/replica_store.h"
#include "runtime/node/node_runtime.h"

namespace rill {

class Replicator {
 public:
  struct Options {
    comm::Transport* transport = nullptr;  // the run's (ranks are the plan's nodes)
    ReplicaStore* store = nullptr;         // the agent's, outliving the run
    int64_t job = 0;
    int phase = 0;
    uint64_t tag_base = 0;                 // the run's
    // The buddies and the nodes before, nearest first, as the run's
    // transport ranks them; `from_ranks`: `from` as machine-list ranks (how
    // the store names them).
    std::vector<int> to, from, from_ranks;
    size_t most = 0;                       // bytes of tensors one message holds (--max-message-bytes)
    // What the node before may send: a step's copy weighs at most what the
    // model's pieces may (most_piece_bytes), and no step is past the run's
    // last.
    uint64_t most_bytes = 0;
    int64_t last_step = 0;
    std::chrono::milliseconds patience{60000};  // for each chunk's ack or next chunk
    std::string me;                        // this node, for the log
  };
  // `pieces`: the node's checkpoint-writing pieces (snapshot_pieces; the
  // compression's carried state is left out).
  Replicator(std::vector<SnapshotPiece> pieces, Options options);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // RunOptions::on_replica: a piece after `steps_done` steps (any thread).
  void add(int64_t steps_done, VariablePiece piece);
  // Once the run has ended well at its plan's end, after `last` steps (a
  // stop may cut the end short of a copy some node already passed): waits
  // until this
  // node's copy of that step has reached its buddies (a node with no pieces
  // sends word of none) and the nodes before's are here (the last step's
  // replicas, which a loss after the training needs: the eval goes on from
  // them), each node before's unless it has stopped sending, or until the
  // patience has passed. What it could not wait for is said in the log.
  void finish(int64_t last);
  // Once the run has ended: stops sending and receiving (what is under way
  // is dropped; the store keeps what was complete).
  void stop();

 private:
  StatusOr<NodeFile> send(int64_t step, std::vector<TensorPiece> tensors);
  // `messages` (none: word that this node holds no pieces) to every buddy
  // at once; the nearest's failure first.
  Status send_to_buddies(int64_t step, const std::vector<std::string>& messages);
  void receive_loop(size_t source);  // from options_.from[source]
  Status bounded(const StreamHeader& header, uint64_t bytes) const;

  Options options_;
  bool has_pieces_ = false;
  std::atomic<bool> stopping_{false};
  Mutex mu_;
  CondVar received_cv_;
  // By source: the newest step of its stored, and whether its receive loop runs.
  std::vector<int64_t> last_received_ GUARDED_BY(mu_);
  std::vector<bool> receiving_ GUARDED_BY(mu_);
  std::unique_ptr<CheckpointCollector> collector_;
  std::vector<std::thread> receivers_;
};

}  // namespace rill
