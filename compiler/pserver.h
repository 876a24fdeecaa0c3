// The parameter-server transpile: PaddlePaddle Fluid's DistributeTranspiler
// as a compile strategy over placements. A job whose `distributed.mode` is
// "pserver" becomes the same job with
//   - every input and op on the trainers (the nodes not named as pservers,
//     all their devices, data parallel);
//   - every trainable variable cut into blocks of whole rows (slice_var_up:
//     as many as there are pservers, none under min_block_size elements
//     unless the variable is; otherwise one), each block a variable
//     "<name>.block<k>" (k from 0, one block too) on device 0 of the pserver
//     the split method picks (RoundRobin: the next pserver, counting over
//     every block of the job in order; HashName: FNV-1a of the block's name,
//     modulo the pservers), with its optimizer and state there;
//   - on the trainers, an op "<name>" = concat of its blocks (axis 0; one
//     block: identity), B (every trainer holds the whole parameter), which
//     every op reading the variable reads.
// The trainers read each block from its pserver; the gradient of a block
// (a slice of the variable's, made on the trainers) moves to its pserver,
// which adds up the trainers' pieces (LogicalGraph::sum_moved_partials, set
// by the compiler for the job it transpiled) and
// updates it: each step's update uses every trainer's gradient (sync mode).
// Async mode (sync_mode false): a block's variable has a lane per trainer
// rank instead (compiler/physical.cc): it reads each rank's gradient piece
// itself, applies it as it comes, and gives each rank its own model regst
// (actor/body.h LanedVariableBody; DC-ASGD when enable_dc_asgd).
// A block is initialized, restored, saved and reported as its rows of the
// variable (graph::Variable::block_of), so checkpoints are those of any mode.
// "collective" / "nccl2": the job unchanged (every node a trainer).
// Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/compiler.h"

namespace rill::compiler {

// DC-ASGD's lambda: the value of Zheng et al.'s experiments.
inline constexpr float kDcAsgdLambda = 0.04f;

struct PserverBlock {
  std::string variable;   // the job's variable
  std::string name;       // the block's variable: "<variable>.block<k>"
  int64_t row_offset = 0;
  int64_t rows = 0;
  int64_t elements = 0;
  int pserver = 0;        // its node
};

struct PserverLayout {
  std::vector<int> pservers;  // nodes, as the job lists them
  std::vector<int> trainers;  // nodes, ascending
  std::vector<PserverBlock> blocks;
};

// The layout of a pserver-mode job on `cluster`: which block of which
// variable on which pserver. Errors: pservers that are not nodes of the
// cluster (or repeated), no node left to train, a trainer count that does
// not match what is left.
StatusOr<PserverLayout> pserver_layout(const graph::Job& job, const Cluster& cluster);

// The layout as lines for a person: the pservers and trainers, then one line
// per block ("w1.block0  rows 0-391 of [784, 512]  200704 elements  pserver node 0").
std::string describe_pserver_layout(const PserverLayout& layout, const graph::Job& job);

// The job the compiler runs: transpiled in pserver mode, else `job` itself.
StatusOr<graph::Job> transpile_pserver(const graph::Job& job, const Cluster& cluster);

}  // namespace rill::compiler
