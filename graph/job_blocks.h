// Repeated blocks of a job file: layers written once (job.fbs Block) and
// expanded into the job's variables and ops, N times, before the job is
// checked. In a block's names, inputs and outputs "{i}" is the
// layer's index and "{input}" what the layer reads: the block's `input` for
// layer 0, the previous layer's `output` after. The last layer's output is
// renamed to the block's `as`, so what follows the block reads one name
// however many layers there are. Random initializers' seeds advance by 1000
// per layer (layer i of a variable with seed s, 0 when unwritten, gets
// s + 1000 i), so layers start apart.
// Internal to graph/; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/check_util.h"
#include "graph/job.h"

namespace rill::graph {

struct Block {
  std::string name;
  int64_t repeat = 1;
  std::string input;   // {input} of layer 0
  std::string output;  // each layer's output ({input} of the next)
  std::string as;      // the last layer's output is renamed to this ("": kept)
  bool recompute = false;  // each layer's ops recompute as one group, "<name>.<i>" (graph/job.h Op), unless an op names its own
  std::vector<Variable> variables;
  std::vector<Op> ops;
};

// Where an op or variable of the expanded job was written, for errors: the
// path of its entry in the file ("blocks[0].ops[3]") and, for a block's, the
// layer ("layer 2 of block 'h'").
struct Origin {
  std::string path;
  std::string layer;
};
// Keyed by the expanded job's path ("ops[17]", "variables[9]"); entries only
// where that path is not the written one.
using Origins = std::map<std::string, Origin>;

// Expands `blocks` (blocks[b]) into `job`: a block's ops go right after the
// last op whose output they read from outside the block (first, if none),
// its variables after the job's. Problems with a block itself are issues.
void expand_blocks(const std::vector<Block>& blocks, Job* job, check::Issues* issues, Origins* origins);

}  // namespace rill::graph
