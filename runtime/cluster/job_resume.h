// Resuming a run from a checkpoint: what run_job (job_runner.h) does first
// when given --resume.
#pragma once

#include <cstdio>
#include <string>

#include "base/file_access.h"
#include "base/status.h"
#include "graph/job.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/node/node_runtime.h"

namespace rill {

// Loads the checkpoint `where` names (a step folder, a checkpoint root, or
// "latest": the job's checkpoint.dir), each file checked against `access`,
// into the run: variables (each checked against the job's shape and
// dtype), optimizer state, the first step (into `run` and `result`); says
// where it resumes, and which optimizer state starts from zero or is left
// unused, on `out` (nullptr: silent).
Status resume_from(const graph::Job& job, const std::string& where, JobResult& result, RunOptions& run,
                   std::FILE* out, const FileAccess& access);

}  // namespace rill
