// CheckpointCollector: one node's side of a checkpoint. The node's
// checkpoint-writing variable actors (one holder of each distinct piece:
// compiler/checkpoint_writers.h) hand it their piece and optimizer state
// after a step; once every piece of that step is there, the collector's own
// thread writes the node's file (checkpoint_pieces.h) and reports it (to the
// master, which makes the step complete), while training goes on.
//
// A snapshot is a copy into host memory taken at the step boundary: that
// copy, and any wait for room, is all that training waits for. While one
// complete step waits for a writer slower than training (kMaxWaiting), the
// next add() waits before it stores its piece, so training slows to the
// disk's pace rather than holding ever more snapshots in memory (the first
// wait past kWarnWaitSeconds is logged, with what to do). The time
// each step's pieces spent so (copying and waiting) is reported with it.
// add() may be called from any thread.
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
#include "graph/job.h"
#include "runtime/checkpoint/checkpoint_pieces.h"
#include "runtime/checkpoint/checkpoint_records.h"
#include "runtime/checkpoint/write_progress.h"
#include "runtime/node/node_runtime.h"

namespace rill {

class CheckpointCollector {
 public:
  static constexpr size_t kMaxWaiting = 1;
  // Writes one node's pieces of a step (by default write_node_file into the
  // job's checkpoint.dir).
  using Writer = std::function<StatusOr<NodeFile>(int64_t step, std::vector<TensorPiece> pieces)>;
  // Told of every step this node wrote (or failed to write), on the
  // collector's thread, in step order.
  using Report = std::function<void(NodeCheckpoint)>;

  // `pieces`: every piece this node writes (snapshot_pieces of its plan).
  CheckpointCollector(const graph::Job& job, std::vector<SnapshotPiece> pieces, Writer writer, Report report);
  ~CheckpointCollector();  // finishes the writes handed over
  CheckpointCollector(const CheckpointCollector&) = delete;
  CheckpointCollector& operator=(const CheckpointCollector&) = delete;

  // piece.copy_seconds: what taking the copy cost its caller.
  void add(int64_t steps_done, VariablePiece piece);
  // The run stopped (a failure, a stall): an add() waiting for room, and
  // any later one, returns without storing its piece (finish() names its
  // step), so a worker is never held by a disk that does not write. What
  // was handed over is still written. Any thread.
  void abandon();
  // An add() that waits longer than this for room says so in the log, once.
  static constexpr double kWarnWaitSeconds = 1.0;
  // Waits until every step handed over is written and reported; the first
  // failed write, or a step whose pieces did not all arrive (call it once the
  // node's run has ended), or the steps abandon() dropped, or ok.
  Status finish();
  int64_t written() const;

 private:
  using PieceKey = std::pair<std::string, std::vector<int64_t>>;  // variable, offset
  struct Step {
    std::map<PieceKey, VariablePiece> pieces;
    double block_seconds = 0;
  };
  std::vector<TensorPiece> tensors(Step& step) const;
  void write_loop();

  std::set<PieceKey> expected_;
  std::map<std::string, DType> stored_;  // the job's variables as stored (checkpoint.dtype; i32 as they are)
  Writer writer_;
  Report report_;
  mutable Mutex mu_;
  CondVar cv_;
  std::map<int64_t, Step> pending_ GUARDED_BY(mu_);  // steps still missing pieces
  std::set<int64_t> handed_over_ GUARDED_BY(mu_);    // steps complete (given to the writer)
  std::map<int64_t, Step> complete_ GUARDED_BY(mu_);  // handed to the writer, written lowest step first
  bool writing_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool abandoned_ GUARDED_BY(mu_) = false;
  std::set<int64_t> dropped_ GUARDED_BY(mu_);  // steps whose pieces came after abandon()
  bool warned_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  int64_t written_ GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the rest is made
};

// The writer of node `node`'s file of each step (of `nodes`) into the job's
// checkpoint.dir within `access`, its bytes told to `progress` as they are
// written. Tests: each write takes `delay_s` longer, spread over its bytes
// (a slow disk).
CheckpointCollector::Writer node_file_writer(const graph::Job& job, int node, int nodes, FileAccess access,
                                             WriteProgress* progress, double delay_s = 0);

}  // namespace rill
