// The phases of a job's run (run_job, job_runner.cc), in the order it runs
// them, each in a file that says which:
//   prepare   the cluster and devices, node 0's training plan compiled and
//             verified (job_runner.cc)
//   describe  what the run is about to do, said before it starts
//             (job_describe.cc)
//   train     progress and metrics, a resume, checkpoints, the training
//             phase run, its figures taken (job_train.cc)
//   finish    the eval pass, generated text, the learned values and the last
//             line (job_finish.cc)
// Each reads and fills one JobRun. Internal to runtime/cluster; called from
// run_job's thread.
#pragma once

#include <string>

#include "compiler/compiler.h"
#include "graph/job.h"
#include "runtime/cluster/job_runner.h"

namespace rill {

struct JobRun {
  const graph::Job& job;
  const JobRunOptions& options;
  compiler::Cluster cluster;
  std::string devices;  // per node: the options', else the job's
  PlanExecutor execute;
  JobResult result;

  // A line to the terminal and to a submitter following the run alike.
  void say(const std::string& line) const;
  bool stopped() const { return options.stop && options.stop->load(); }
  bool speaks() const { return options.out || options.on_line; }
};

// describe: the first lines (the job, its steps and devices; stages,
// mixed precision, loss scaling, parameter servers, the datasets read).
void describe_run(const JobRun& run, const plan::Plan& plan);
// train: runs `phase` (a progress line every `log_every` steps), filling
// run.result; a run that regroups (result.regrouped) ends with kUnavailable
// at the step every node holds.
Status train(JobRun& run, PhasePlan phase, int64_t log_every);
// finish: the eval pass and the generated text (not after a stop), then
// the learned values and the last line.
Status evaluate(JobRun& run);
Status generate(JobRun& run);
void report(JobRun& run);

}  // namespace rill
