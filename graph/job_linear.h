// The `linear` op of job files: y = x w (+ b), one op for the one who writes
// the job, the ops the long form spells for the plan. An op
//   {"name": "N", "type": "linear", "inputs": [x, w, b]}
// becomes a matmul named "N.matmul" and a bias_add named N (without b, a
// matmul named N), in its place, so `rill plan` lists the kernels the
// long form would and a job trains to its losses bit for bit. Its attrs
// (transpose_b, ...) are the matmul's. Run after the blocks are expanded;
// `origins` keeps pointing each expanded op at what was written.
// Internal to graph/; any thread.
#pragma once

#include "graph/check_util.h"
#include "graph/job.h"
#include "graph/job_blocks.h"

namespace rill::graph {

void expand_linear_ops(Job* job, check::Issues* issues, Origins* origins);

}  // namespace rill::graph
