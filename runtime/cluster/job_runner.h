// Runs a whole job on this machine: compiles the training plan, runs it, then
// (when the job has an eval section) compiles and runs the forward-only eval
// plan starting from the trained variables. Prints one progress line per log
// step. Called from one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"
#include "graph/job.h"
#include "runtime/checkpoint/checkpoint_records.h"
#include "runtime/node/node_runtime.h"

namespace rill {

class WriteProgress;  // runtime/checkpoint/write_progress.h

// One phase of a job (training, eval) as an executor gets it: node 0's plan
// (on one node, the whole plan) and what every other node compiles its own
// plan with: the devices and the options, but for the node, which is each
// node's own; the steps are node 0's plan's.
struct PhasePlan {
  std::string plan;
  std::string devices;
  compiler::CompileOptions compile;
  // Where every node's report of a checkpoint file it wrote goes (the run's
  // completer: runtime/cluster/job_checkpoints.h); empty: no checkpoints.
  std::function<void(int node, NodeCheckpoint written)> on_checkpoint;
  // What a node writes into checkpoints beside its variables (its
  // compressed all-reduces' carried state: runtime/node/carried_state.h),
  // as its ack of the plan says, before the phase starts; an error fails it.
  std::function<Status(int node, const std::vector<std::pair<std::string, std::vector<int64_t>>>& pieces)>
      expect_carried;
};

// Runs one phase and reports (by default run_plan of the plan on this
// machine; the master agent's executor has every node compile and run its
// own part).
using PlanExecutor = std::function<RunReport(const PhasePlan& phase, const RunOptions& options)>;

struct JobRunOptions {
  std::string devices;            // devices per node, e.g. "cpu:2"; empty: the job's train.devices
  // Who chose `devices` over the job's own, as the first line says it.
  std::string devices_from = "--devices";
  int num_nodes = 1;              // nodes the plan spans
  PlanExecutor executor;          // empty: run_plan
  int64_t steps = 0;              // > 0 overrides the job's steps
  double stall_timeout_s = 60.0;  // stuck-job detector
  std::string trace_file;         // Chrome-trace JSON of every act, when not empty
  bool trace = false;             // the same into JobResult::trace_json (the master's, for its client)
  // Resume from a checkpoint: a step folder, a checkpoint root, or "latest"
  // (the newest under the job's checkpoint.dir). Empty: start afresh.
  std::string resume;
  // >= 0: the run goes on from this step with the values every node kept in
  // memory (live membership: the executor's nodes start from their own);
  // the job's checkpoints are its own so far. Not with `resume`.
  int64_t start_from_memory = -1;
  // Live membership: the model (every variable, whole) node 0 holds in
  // memory after `steps_done` steps. A run that starts from memory with no
  // step left to train (a node lost in the eval, or as the training ended)
  // runs what follows training with it.
  std::function<StatusOr<std::map<std::string, VariableValue>>(int64_t steps_done)> model_in_memory;
  // Live membership with replicas: node 0 gathers the model after
  // `steps_done` steps from the replicas into its memory (where the
  // attempt's nodes go on from them; a no-op where it holds it already).
  std::function<Status(int64_t steps_done)> gather_replicas;
  std::FILE* out = stdout;        // progress lines; nullptr: silent
  // Also told every progress line (the master forwards them to a client).
  std::function<void(const std::string& line)> on_line;
  // Where to append the training's metrics as JSON lines (empty: nowhere).
  std::string metrics_file;
  // Each node's pace, for the metrics file's lines ([{node, steps_per_second, ...}]).
  std::function<nlohmann::json()> node_pace;
  // Told the training plan's steps and global batch before it runs.
  std::function<void(int64_t steps, int64_t global_batch)> on_plan;
  // A stop asked for (Ctrl-C): when it turns true, the running phase ends at
  // a step boundary (the executor agrees it with every node), with the
  // job's last checkpoint there, and no later phase (eval, generate) runs.
  const std::atomic<bool>* stop = nullptr;
  // Live membership: when it is true as the training phase ends before its
  // last step (ended at a step boundary to take back a node), the run
  // returns there (JobResult::regrouped) for the caller to go on with the
  // nodes it has now.
  const std::atomic<bool>* regroup = nullptr;
  // Where the job's datasets and checkpoints may lie (an agent's roots),
  // checked as each file is opened (base/file_access.h); by default
  // anywhere (a user's own run).
  FileAccess data_access, checkpoint_access;
  // Tests: every checkpoint write takes this many seconds longer (a slow disk).
  double checkpoint_write_delay_s = 0;
  // Where node 0's checkpoint writes tell their bytes (null: the job's own),
  // and what grows while work the runs wait for goes on elsewhere (other
  // nodes' checkpoint writes, as the master hears of them): the runs'
  // RunOptions::liveness is both.
  WriteProgress* write_progress = nullptr;
  comm::Liveness liveness;
};

// One automatic restart of a job (Submit::max_restarts): why the attempt
// before it failed and how far it had come, where the next one began, and
// how long training stood still.
struct JobRestart {
  std::string error;
  int64_t failed_at_step = 0;      // steps done when the attempt failed
  int64_t resumed_from_step = 0;   // the checkpoint the next attempt began from (0: the start)
  int nodes = 0;              // how many nodes the next attempt ran on
  // Live membership: the next attempt went on from the nodes' memory (not
  // a checkpoint on disk), on the nodes that remained.
  bool from_memory = false;
  double seconds_until_whole = 0;  // from the failure to every node being up again
  double seconds_to_first_step = 0;  // from then to the next attempt's first step
};

struct JobResult {
  Status status;
  int64_t steps = 0;               // where training ended: the plan's steps, or fewer when stopped
  int64_t planned_steps = 0;       // the plan's
  bool interrupted = false;        // stopped early (JobRunOptions::stop)
  bool regrouped = false;          // ended at `steps` to go on with other nodes (JobRunOptions::regroup)
  int64_t start_step = 0;          // > 0 when resumed
  int64_t global_batch = 0;
  int64_t checkpoints_written = 0;
  std::vector<CheckpointRecord> checkpoints;  // each complete one: its step, bytes, time blocked and writing
  int64_t control_bytes_from_nodes = 0;        // what the other nodes sent the master in training's control messages
  double final_loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> loss_curve;                  // per step
  std::map<std::string, double> train_metrics;     // last step's
  // The mirrored view: the last logged step's metrics of each rank (train_metrics
  // holds their means).
  std::vector<std::map<std::string, double>> rank_metrics;
  std::map<std::string, double> eval_metrics;      // mean over the eval pass
  int64_t eval_samples = 0;
  double train_seconds = 0.0;
  // On a cluster: from the master taking the job from its queue to the
  // first step's metrics reaching it (every node's compile, the data checks,
  // the start); 0 where not measured.
  double seconds_to_first_step = 0.0;
  std::string trace_json;  // JobRunOptions::trace: the training's timeline (trace_json below)
  double samples_per_sec = 0.0;         // over the whole training run
  double steady_samples_per_sec = 0.0;  // after the first min(20, steps/5) steps
  std::map<std::string, VariableValue> variables;
  // job.fetch at the last step (i32 values as floats); the mirrored view
  // fetches each rank's own tensor, as "tensor@rank".
  std::map<std::string, VariableValue> fetched;
  std::vector<std::vector<int64_t>> traffic;  // of the training phase, see RunReport
  std::vector<std::vector<int64_t>> traffic_bytes;
  std::vector<JobRestart> restarts;  // automatic restarts before this result, oldest first
  // train.buckets_by_link's decision (runtime/watch/bucket_sizing.h): the
  // size the run ended with, why, and from which step (-1: kept); bytes 0:
  // nothing decided (not asked for, or the job ended before its links were
  // measured).
  struct Buckets {
    int64_t bytes = 0;
    std::string reason;
    int64_t from_step = -1;
  } buckets;
  // On a cluster: from which step the job ran on how many nodes (a lost node
  // under live membership, a restart), oldest first; empty on one process.
  std::vector<std::pair<int64_t, int>> nodes_from_step;
  int64_t device_synchronizes = 0;   // of the training phase, see RunReport
  std::string generated;             // job.generate's text: the prompt and what the model wrote
  std::string summary;               // the last line: "done: N steps in ...", the checkpoints kept
};

JobResult run_job(const graph::Job& job, const JobRunOptions& options);

// The result as JSON: status, steps, final_loss, metrics, samples_per_sec,
// every variable's shape with its values when it has at most 64 elements,
// and each fetched tensor whole.
std::string result_json(const JobResult& result);

// Writes act timestamps as Chrome-trace JSON: one track per worker thread (its
// actors' acts as named events), and per GPU thread one of its stream's work.
Status write_trace(const std::string& path, const std::vector<ActorTraceRecord>& traces);
std::string trace_json(const std::vector<ActorTraceRecord>& traces);

}  // namespace rill
