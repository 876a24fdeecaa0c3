// The job checker: semantic validation of a graph::Job before it is compiled.
// It reports every problem it can find independently (an undefined tensor does
// not also produce shape errors downstream), each naming the field at fault,
// e.g. "ops[3] (fc2): input 'h9' is not defined (known: x, w1, h1)".
//
// What is checked: op types exist and are compute ops, arity, unique names,
// every op input defined by an earlier input, variable or op, shapes (through
// each op's own inference), the loss and metrics (defined, scalar), datasets
// (known kind, required fields), input fields and dtypes, variable
// initializers, SBP hints, optimizer, train, eval and checkpoint settings.
// Files named by datasets are not opened, nor the checkpoint directory: a job
// may be checked on a machine other than the ones that read the data, which
// report a missing file when the job starts.
//
// Pure functions of their arguments; any thread. Never crash on any Job.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/job.h"

namespace rill::graph {

// One problem: `path` is the field at fault in job-file terms ("ops[3].inputs",
// "train.batch_size") so a loader can map it to a line; `message` is complete
// on its own and starts with the element it names ("ops[3] (fc2): ...").
struct JobIssue {
  std::string path;
  std::string message;
};

// Every problem found, in the order of the job's sections; empty if the job is good.
std::vector<JobIssue> find_job_issues(const Job& job);

// OK, or InvalidArgument whose message lists every issue, one per line.
Status check_job(const Job& job);

// Compares each input's declared per-sample shape and dtype with what its
// dataset's files hold, read from their heads (graph/data_check.cc; idx and
// CSV: the other kinds' shapes are in the job, which check_job covers). The
// first disagreement is the error, naming the input, field, dataset, files
// and both shapes; so is a file read here that is not of its kind. A file
// that cannot be read here (missing, a pipe: kernels/data/dataset_peek.h's
// unreadable_here) is not an error (the run checks where it runs):
// `unreadable` gets a line for each.
Status check_job_data(const Job& job, std::vector<std::string>* unreadable);

}  // namespace rill::graph
