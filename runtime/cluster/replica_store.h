// ReplicaStore: an agent's in-memory replicas (live membership with a layout
// that splits variables across nodes, docs/FAULTS.md): this node's own
// pieces as they stood after its last replica steps, and the pieces of the
// node before it in the plan (the nodes before it, with --replica-copies),
// received whole (runtime/cluster/replicator.h).
// When a node is lost, node 0 gathers every survivor's own pieces and the
// lost node's replica at a step they all hold (master_gather.cc), and the
// job goes on from them with a plan on the nodes that remain.
//
// Pieces are held as the messages that carry them (memory_pieces.h): what
// goes to the buddy is kept as it was sent, and goes to node 0 as it is.
// Own steps: the newest kOwnSteps, so that every survivor still holds the
// step a lost node's replica is complete at (a replica step starts only
// once the one before reached every buddy, and nodes are at most a step
// apart). Each source's newest kReplicaSteps complete replicas. What an
// earlier run (another phase: another plan, other pieces, another ring of
// buddies) kept is dropped as a run begins, and another job's. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace rill {

class ReplicaStore {
 public:
  static constexpr size_t kOwnSteps = 3, kReplicaSteps = 2;
  using Messages = std::shared_ptr<const std::vector<std::string>>;

  // A run of job `job`'s phase `phase` that copies pieces begins.
  void begin_run(int64_t job, int phase);
  // This node's own pieces after `step` steps, from a run of job `job`'s
  // phase `phase` (a run of another phase than the last begun is an old
  // one still ending: what it copies is not kept). Returns them, to send.
  Messages keep_own(int64_t job, int phase, int64_t step, std::vector<std::string> messages);
  // Source `source`'s (a machine-list rank) pieces after `step` steps, whole.
  void keep_replica(int64_t job, int phase, int source, int64_t step, std::vector<std::string> messages);
  // Steps held, oldest first.
  std::vector<int64_t> own_steps(int64_t job) const;
  std::map<int, std::vector<int64_t>> replica_steps(int64_t job) const;
  // The messages held; kNotFound names what is not held.
  StatusOr<Messages> own_at(int64_t job, int64_t step) const;
  StatusOr<Messages> replica_at(int64_t job, int source, int64_t step) const;
  // Bytes held (the messages').
  int64_t bytes() const;

 private:
  // Whether a run of (job, phase) may keep pieces here (a later job's
  // replaces this one's; an earlier job's is late, and kept nowhere).
  bool current(int64_t job, int phase) REQUIRES(mu_);
  mutable Mutex mu_;
  int64_t job_ GUARDED_BY(mu_) = -1;
  int phase_ GUARDED_BY(mu_) = -1;
  std::map<int64_t, Messages> own_ GUARDED_BY(mu_);
  std::map<int, std::map<int64_t, Messages>> replicas_ GUARDED_BY(mu_);
};

}  // namespace rill
