// Cross-node transfers, the pass after physical expansion. A regst read by a
// task on another node than its producer's (the sink on node 0 reading the
// loss pieces of node 1, ...) is read there directly when both ends are in
// host memory: the runtime ships a slot's bytes with its `ready` into the
// reader node's mirror slots. Where a GPU task is either end, the regst gets
// a Send task on the producer's node and a Recv task on the reader's node,
// one pair per (regst, reading node), both on their node's io thread, so
// that the bytes cross in host memory (insert_copies adds the device copies):
// Send reads the regst and writes a wire regst whose only reader is the
// Recv; Recv writes a new regst that replaces the original in the inputs of
// the readers on its node.
// Run before regst planning (which derives consumers from inputs). Pure; any thread.
#pragma once

#include "compiler/task_graph.h"

namespace rill::compiler {

Status insert_transfers(TaskGraph* graph);

// Memory-zone copies, the pass after insert_transfers: a regst lives where its
// producer runs (a cuda device's memory, or host memory for cpu, io and comm
// threads). Every regst read in another zone gets a Copy task on the cuda
// device's thread (host to device before a cuda reader; device to host after
// a cuda producer; from another GPU of the node, peer to peer, before a cuda
// reader: no host memory between), one per (regst, reading zone), whose output lives in the
// readers' zone and replaces the regst in their inputs. Sets every regst's
// `device`, which the runtime allocates by. Boxing, sources, sinks and
// cross-node transfers stay on the host: GPU tasks reach them through copies.
Status insert_copies(TaskGraph* graph);

}  // namespace rill::compiler
