// What a checkpoint's writers report: a node's file of a step, written or
// not (CheckpointCollector), and a complete step (CheckpointCompleter), as
// the metrics and the result report them.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "runtime/checkpoint/checkpoint_pieces.h"

namespace rill {

// A node's file of one step, written or not.
struct NodeCheckpoint {
  int64_t step = 0;
  Status status;
  NodeFile file;               // when written
  double block_seconds = 0;    // training's time on it: the copies and any wait for room
  double write_seconds = 0;    // the writer's time on it, in the background
};

// One complete checkpoint.
struct CheckpointRecord {
  int64_t step = 0;
  int files = 0;
  int64_t bytes = 0;
  double block_seconds = 0;  // the longest any node's training spent on it
  double write_seconds = 0;  // the slowest node's write, in the background
};

}  // namespace rill
