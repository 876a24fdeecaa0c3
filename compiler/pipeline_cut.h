// Pipeline cuts: a job whose pipeline gives num_stages N (and places nothing
// itself) becomes the same job with N groups "stage0" ... "stage<N-1>" named
// as its pipeline.stages, as a user would write them. The ops, in job order
// (a topological order), are cut into N contiguous runs that minimize the
// largest run's cost: "params", the bytes of the variables an op is the
// first to read; "flops", 2 M N K for a matmul and the output elements for
// any other op (shapes from the logical graph). A stage begins where a layer
// does (an op that reads a variable, after ops that read none: a matmul
// after a relu, not the bias_add after a matmul), unless the job has too
// few such places. Inputs and variables join
// the stage of the first op that reads them. Stage i runs on the i-th of N
// equal parts of the cluster: whole nodes when N divides the nodes, else,
// on one node, its devices. Pure; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/compiler.h"

namespace rill::compiler {

StatusOr<graph::Job> cut_stages(const graph::Job& job, const Cluster& cluster);

// Every stage of pipeline.stages on devices of its own: two stage groups
// placed on the same devices would count as one stage (stages are counted
// from moves between placements) and get the wrong 1F1B slots, so that is
// an error naming both groups and their devices.
struct LogicalGraph;
Status check_stage_devices(const graph::Job& job, const LogicalGraph& g);

// Cuts `costs` into `parts` non-empty contiguous runs minimizing the largest
// run's sum, a run beginning only where `may_start` (anywhere, when there
// are too few such places); returns each element's run. The elements
// between two places are a block; the least feasible largest sum is found
// by bisection, packing whole blocks greedily (as late a cut as fits is
// never worse); runs short of `parts` are then split at block boundaries
// (which never raises the largest).
// REQUIRES: 1 <= parts <= costs.size() == may_start.size().
std::vector<int> balanced_runs(const std::vector<int64_t>& costs, std::vector<bool> may_start, int parts);

}  // namespace rill::compiler
