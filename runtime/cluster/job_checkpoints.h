// A run's checkpoints, as run_job (job_runner.h) sets them up: every node
// writes its own pieces in the background (node 0's collector here, every
// other node's in its agent), and the completer here writes each step's
// meta.json once every writing node has reported its file
// (runtime/checkpoint/checkpoint_pieces.h).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "compiler/compiler.h"
#include "graph/job.h"
#include "runtime/checkpoint/checkpoint_collector.h"
#include "runtime/checkpoint/checkpoint_completer.h"
#include "runtime/cluster/job_runner.h"

namespace rill {

class JobCheckpoints {
 public:
  // Checks the job's checkpoint.dir (writable; steps of another run there
  // are an error unless resumed or overwritten), removes the steps after
  // `start_step` an earlier run left, and makes node 0's collector from its
  // plan and the completer from the nodes that write (a line per complete
  // step into `metrics`, when given).
  static StatusOr<std::unique_ptr<JobCheckpoints>> make(const graph::Job& job, const compiler::Cluster& cluster,
                                                        std::string_view node0_plan, const JobRunOptions& options,
                                                        int64_t start_step, std::FILE* metrics);

  // Node 0's snapshots into its collector, every node's reports into the
  // completer; node 0's writes count as the run's liveness where the run
  // has none of its own (a run alone: RunOptions::liveness).
  void attach(RunOptions& run, PhasePlan& phase);
  // Once every node has ended: node 0's last writes, then every complete
  // step's meta.json; the first failure.
  Status finish();
  std::vector<CheckpointRecord> records() const { return completer_->records(); }

 private:
  JobCheckpoints() = default;
  int64_t every_ = 0;
  WriteProgress own_progress_;                 // node 0's writes, where the options name no other
  WriteProgress* progress_ = &own_progress_;
  std::optional<CheckpointCompleter> completer_;
  std::optional<CheckpointCollector> collector_;  // destroyed first: its last report goes to the completer
};

// The JSON line of one complete checkpoint in the metrics file.
std::string checkpoint_metrics_line(const CheckpointRecord& record);

}  // namespace rill
