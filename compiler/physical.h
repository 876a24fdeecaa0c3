// Physical expansion: turns a LogicalGraph (after SBP deduction and boxing
// insertion) into a TaskGraph with one task per (op, rank) and the regsts
// between them. Task order, and so every actor id, is fixed: sources (per used
// dataset, per rank), variables (per variable, per rank), compute (per op, per
// rank), boxing, then the sink (node 0's io thread). Each task output is one
// regst, in task order. Boxing on one node: one task per boxing node over every
// piece, on node 0's comm thread 0. Across nodes: one task per boxing node and
// node over the node's own pieces, on one of 4 comm threads of each node,
// chained in one order by control regsts, peers and collective tag (the
// boxing's ordinal + 1) set; P -> B boxings of f32 tensors under
// `bucket_bytes` that come one after another in that order share one task
// (a bucket, one all-reduce) up to `bucket_bytes`. Regsts still cross nodes
// afterwards (the sink's inputs): read there directly, or through Send/Recv
// pairs where a GPU holds an end (transfers.h). With `node` >= 0 only that node's tasks are stored (and every task
// that may read across nodes: the sink, moves and readers of moves); the
// rest are numbered alike on every node but not built (task_graph.h). With
// a `compression` the all-reduces of variables' gradients across nodes
// through host memory go in bf16 or as PowerSGD's factors, with error
// feedback (BoxingConf.compress).
// Pure; any thread.
#pragma once

#include "compiler/logical_graph.h"
#include "compiler/task_graph.h"

namespace rill::compiler {

// train.compression, compression_rank and compression_start_step.
struct GradientCompression {
  graph::Compression kind = graph::Compression::kNone;
  int rank = 0;
  int64_t start_step = 0;  // steps before it all-reduce uncompressed
};

StatusOr<TaskGraph> expand(const LogicalGraph& graph, size_t bucket_bytes, int node = -1,
                           GradientCompression compression = {});

}  // namespace rill::compiler
