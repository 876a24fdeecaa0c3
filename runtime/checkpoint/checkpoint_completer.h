// CheckpointCompleter: the master's side of a checkpoint. Every node that
// writes pieces (CheckpointCollector) reports its file of a step; once every
// such node has, the completer's own thread writes the step's meta.json
// (checkpoint_pieces.h: last, so the step is complete or absent), points
// `latest` at it and prunes. No variable bytes reach the master: a report
// names a file and the pieces in it. add() never waits (the master's
// control loop calls it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "runtime/checkpoint/checkpoint_collector.h"

namespace rill {

class CheckpointCompleter {
 public:
  // Makes a step complete from its nodes' files (by default write_step_meta).
  // Pieces a node's report may list per variable piece it writes (the
  // variable and its optimizer states).
  static constexpr size_t kMaxStatesPerPiece = 8;
  using MetaWriter = std::function<Status(int64_t step, const std::vector<NodeFile>& files)>;
  // Told of every complete step, on the completer's thread.
  using OnComplete = std::function<void(const CheckpointRecord&)>;

  // A variable's piece: its name and offset.
  using PieceKey = std::pair<std::string, std::vector<int64_t>>;
  // `expected`: each writing node's (plan index) pieces of the variables;
  // a node's file must hold exactly those (and their optimizer state).
  CheckpointCompleter(std::map<int, std::set<PieceKey>> expected, MetaWriter write, OnComplete on_complete = {});
  ~CheckpointCompleter();
  CheckpointCompleter(const CheckpointCompleter&) = delete;
  CheckpointCompleter& operator=(const CheckpointCompleter&) = delete;

  // Adds what node `node` writes beside its variables: its compressed
  // all-reduces' carried state (runtime/node/carried_state.h), which its
  // ack of the plan lists before the phase starts, so before any report.
  // Names outside kCarriedPrefix, or more pieces than two per variable (a
  // bucket holds at least one variable's gradient: an error and a Q), are
  // refused.
  Status expect_carried(int node, const std::vector<PieceKey>& pieces);
  void add(int node, NodeCheckpoint written);
  // Waits for the meta.json of every step whose files all came; the first
  // failure (a node's write, the meta's), or a step some node never reported
  // (call it once every node has ended: each reports its files first), or ok.
  Status finish();
  int64_t written() const;
  std::vector<CheckpointRecord> records() const;

 private:
  struct Step {
    std::map<int, NodeCheckpoint> files;  // by node
  };
  void write_loop();

  std::map<int, std::set<PieceKey>> expected_ GUARDED_BY(mu_);
  std::set<std::string> variable_names_;  // of the variables' pieces (set when made)
  MetaWriter write_;
  OnComplete on_complete_;
  mutable Mutex mu_;
  CondVar cv_;
  std::map<int64_t, Step> pending_ GUARDED_BY(mu_);   // steps still missing files
  std::map<int64_t, Step> complete_ GUARDED_BY(mu_);  // every file there: meta.json to write, lowest step first
  std::set<int64_t> done_ GUARDED_BY(mu_);            // steps handed to the writer (a repeated report is ignored)
  bool writing_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  std::vector<CheckpointRecord> records_ GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the rest is made
};

}  // namespace rill
