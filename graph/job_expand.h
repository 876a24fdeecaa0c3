// Ops of job files written short, which loading writes as the ops the long
// form spells, in their place, so that `rill plan` lists the kernels the
// long form would and a job trains to its losses bit for bit:
//   linear     {"name": "N", "type": "linear", "inputs": [x, w, b]}: a
//              matmul named "N.matmul" and a bias_add named N (without b,
//              a matmul named N); its attrs (transpose_b, ...) are the
//              matmul's (job_linear.cc).
//   attention  with attr `heads` H, on q, k, v of [B, T, C]: each reshaped
//              to [B, T, H, C/H] and transposed to [B, H, T, C/H] (named
//              "N.q", "N.k", "N.v"), the fused attention op (or, with
//              `composed`, matmul, softmax and matmul), transposed back and
//              reshaped to [B, T, C] as N (job_attention.cc).
// Run after the blocks are expanded and the groups read: a group naming
// such an op holds every op it became. `origins` keeps pointing each
// expanded op at what was written. Internal to graph/; any thread.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "graph/check_util.h"
#include "graph/job.h"
#include "graph/job_blocks.h"

namespace rill::graph {

void expand_short_ops(Job* job, check::Issues* issues, Origins* origins);

// One op's expansion (for an op of its kind), or what is wrong with it.
StatusOr<std::vector<Op>> expand_linear(const Op& op);
StatusOr<std::vector<Op>> expand_attention_heads(const Op& op);

}  // namespace rill::graph
