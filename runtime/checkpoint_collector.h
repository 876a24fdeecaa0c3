// CheckpointCollector: gathers the variable pieces (with their optimizer
// state) that the variable actors of every node snapshot after a step, and
// writes a checkpoint once every piece of that step has arrived. The master
// owns one per training run. add() may be called from any thread.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/compiler.h"
#include "graph/job.h"
#include "runtime/node_runtime.h"

namespace rill {

class CheckpointCollector {
 public:
  // `pieces`: every piece a step's checkpoint needs (compiler::variable_pieces).
  CheckpointCollector(const graph::Job& job, const std::vector<compiler::VariablePieceOrigin>& pieces);
  void add(int64_t steps_done, VariablePiece piece);
  // The first failed write, or ok.
  Status status() const;
  int64_t written() const;

 private:
  using PieceKey = std::pair<std::string, std::vector<int64_t>>;  // variable, offset
  Status write(int64_t steps_done, std::map<PieceKey, VariablePiece>& pieces);

  graph::CheckpointConfig config_;
  std::string job_name_;
  std::string optimizer_;
  std::set<PieceKey> expected_;
  mutable std::mutex mu_;
  std::map<int64_t, std::map<PieceKey, VariablePiece>> pending_;  // GUARDED_BY(mu_)
  Status status_;                                                  // GUARDED_BY(mu_)
  int64_t written_ = 0;                                            // GUARDED_BY(mu_)
};

}  // namespace rill
