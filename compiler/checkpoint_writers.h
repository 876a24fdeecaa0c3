// Which node writes each piece of a variable into a checkpoint. Every node
// writes the pieces it holds into a file of its own (runtime/checkpoint/),
// and a piece held by several nodes (a replicated variable in data
// parallelism) is written once: by the holder with the fewest bytes to write
// so far, so a replicated model spreads over the nodes' disks and links
// instead of landing on one. Within that node, its lowest device holding the
// piece reports it.
//
// The compiler (each node compiling its own plan) and the master (knowing
// which nodes' files make a step whole) both walk the job's variables in the
// logical graph's order through one CheckpointWriters, so they agree.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "compiler/logical_graph.h"
#include "graph/placement.h"

namespace rill::compiler {

class CheckpointWriters {
 public:
  // For each rank of `p` that holds a piece of `v`: whether it writes that
  // piece (exactly one rank per distinct piece does).
  std::vector<bool> writers(const VariableNode& v, const graph::Placement& p);

 private:
  std::map<int, int64_t> bytes_;  // by node: elements chosen to write so far
};

}  // namespace rill::compiler
