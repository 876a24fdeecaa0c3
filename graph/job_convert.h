// Conversion of a parsed job-file buffer (graph/job.fbs) into a graph::Job.
// Structural only: values the Job cannot hold (a dtype "f64", an SBP "S(x)",
// an i32 tensor value 1.5) are issues; meaning is left to check_job.
// Internal to graph/; any thread.
#pragma once

#include <flatbuffers/idl.h>

#include "graph/check_util.h"
#include "graph/job_blocks.h"
#include "graph/job.h"
#include "graph/job_generated.h"

namespace rill::graph {

// `parser` is the one that parsed `root` (its schema gives the attribute
// tables' fields). Fields absent from the file keep graph::Job's defaults.
// Repeated blocks are expanded (job_blocks.h); `origins` says where the
// expanded job's entries were written.
void convert_job(const fb::Job& root, const flatbuffers::Parser& parser, Job* job, check::Issues* issues,
                 Origins* origins);

}  // namespace rill::graph
