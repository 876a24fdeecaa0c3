// CheckpointCollector: gathers the variable pieces (with their optimizer
// state) that the variable actors of every node snapshot after a step, and
// writes a checkpoint once every piece of that step has arrived. The master
// owns one per training run.
//
// Writing is the collector's own thread's work: add() only stores the piece
// (and, for the last piece of a step, hands the step over), so neither the
// variable actor that snapshots (training) nor the agent's control loop
// (heartbeats) waits for the disk. At most kMaxWaiting complete steps wait
// for the writer; a writer slower than that makes add() wait for it (training
// slows to the disk's pace rather than holding ever more snapshots in
// memory). add() may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compiler/compiler.h"
#include "graph/job.h"
#include "runtime/cluster/checkpoint.h"
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

  void add(int64_t steps_done, VariablePiece piece);
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
  Writer writer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Pieces> pending_;                // GUARDED_BY(mu_): steps still missing pieces
  std::set<int64_t> handed_over_;                    // GUARDED_BY(mu_): steps complete (given to the writer)
  std::deque<std::pair<int64_t, Pieces>> complete_;  // GUARDED_BY(mu_): handed to the writer
  bool writing_ = false;                             // GUARDED_BY(mu_)
  bool stopping_ = false;                            // GUARDED_BY(mu_)
  Status status_;                                    // GUARDED_BY(mu_)
  int64_t written_ = 0;                              // GUARDED_BY(mu_)
  std::thread thread_;  // last: starts once the rest is made
};

}  // namespace rill
