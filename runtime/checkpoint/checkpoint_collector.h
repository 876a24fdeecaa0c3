// CheckpointCollector: gathers the variable pieces (with their optimizer
// state) that the variable actors of every node snapshot after a step, and
// writes a checkpoint once every piece of that step has arrived. The master
// owns one per training run.
//
// Writing is the collector's own thread's work: add() only stores the piece
// (and, for the last piece of a step, hands the step over). Back-pressure
// falls on training, never on the agent's control loop: while kMaxWaiting
// complete steps wait for a writer slower than training, add() from a
// variable actor (training) waits for room before it stores its piece, so
// training slows to the disk's pace rather than holding ever more snapshots
// in memory; add() with `may_wait` false (the master's control loop, storing
// other nodes' pieces) never waits, so heartbeats go on however slow the
// disk. Other nodes run at most a step or two ahead of the master's
// variables (a synchronous job needs them every step), so what waits stays
// bounded. add() may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "compiler/compiler.h"
#include "graph/job.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/node/node_runtime.h"

namespace rill {

class CheckpointCollector {
 public:
  static constexpr size_t kMaxWaiting = 2;
  // Writes one assembled checkpoint (by default write_checkpoint into the
  // job's checkpoint.dir, keeping checkpoint.keep).
  using Writer = std::function<Status(const Checkpoint&)>;

  // `pieces`: every piece a step's checkpoint needs (compiler::variable_pieces).
  CheckpointCollector(const graph::Job& job, const std::vector<compiler::VariablePieceOrigin>& pieces,
                      Writer writer = {});
  ~CheckpointCollector();  // finishes the writes handed over
  CheckpointCollector(const CheckpointCollector&) = delete;
  CheckpointCollector& operator=(const CheckpointCollector&) = delete;

  void add(int64_t steps_done, VariablePiece piece, bool may_wait = true);
  // Waits until every step handed over is written; the first failed write,
  // or a step whose pieces did not all arrive (call it once every node has
  // ended: they send their snapshots first), or ok.
  Status finish();
  int64_t written() const;

 private:
  using PieceKey = std::pair<std::string, std::vector<int64_t>>;  // variable, offset
  using Pieces = std::map<PieceKey, VariablePiece>;
  Checkpoint assemble(int64_t steps_done, Pieces& pieces) const;
  void write_loop();

  graph::CheckpointConfig config_;
  std::string job_name_;
  std::string optimizer_;
  std::set<PieceKey> expected_;
  std::map<std::string, DType> stored_;  // the job's variables as stored (checkpoint.dtype; i32 as they are)
  Writer writer_;
  mutable Mutex mu_;
  CondVar cv_;
  std::map<int64_t, Pieces> pending_ GUARDED_BY(mu_);  // steps still missing pieces
  std::set<int64_t> handed_over_ GUARDED_BY(mu_);      // steps complete (given to the writer)
  // Handed to the writer, written lowest step first (a step the control
  // loop completed while training waited for room with an earlier one is
  // written after it, so `latest` never goes back).
  std::map<int64_t, Pieces> complete_ GUARDED_BY(mu_);
  bool writing_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  int64_t written_ GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the rest is made
};

}  // namespace rill
