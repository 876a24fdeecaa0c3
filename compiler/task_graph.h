// TaskGraph: the physical graph the last passes build and the plan writer
// emits. Tasks and regsts are addressed by their index, which is also their
// position in the whole Plan's tasks and regsts (and a regst's global id); a
// task's actor id carries its index.
// A value owned by one compile() call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "graph/job.h"
#include "kernels/attrs.h"
#include "kernels/tensor.h"

namespace rill::compiler {

struct RegstNode {
  std::string name;            // the logical tensor it holds
  int producer = -1;           // task index
  std::vector<int> consumers;  // task indices, sorted (regst planning)
  int register_num = 1;        // set by regst planning
  TensorMeta meta;             // this piece
  Shape logical_shape;
  NdSbp sbp;
  bool is_model = false;
  bool ctrl = false;  // a control regst: orders its producer before its consumers; its bytes are unused
  int device = -1;  // the cuda device whose memory holds it; -1: host (set by insert_copies)
};

struct SourceInfo {
  int dataset = 0;  // index into TaskGraph::datasets
  std::vector<std::string> fields;
  int shard = 0;  // rows: part `shard` of num_shards, then part `sub_shard` of that
  int num_shards = 1;
  int sub_shard = 0;
  int num_sub_shards = 1;
};

struct VariableInfo {
  std::string init_op;
  Attrs init_attrs;
  std::string update_op;  // empty: not trained
  Attrs update_attrs;
  int num_state = 0;
  std::vector<int64_t> offset;
};

struct SinkInfo {
  std::vector<std::string> names;
  std::vector<bool> partial;
  std::vector<std::string> fetch;  // after the reported inputs: one whole piece each
};

struct BoxingInfo {
  NdSbp in;
  NdSbp out;
  int parallel = 1;         // pieces over all nodes
  int num_nodes = 1;        // > 1: one task per node, each with its local pieces
  int local_pieces = 1;
  int first_rank = 0;
  int64_t collective_tag = 0;   // 0: no collective among nodes
  std::vector<int> peers;       // task indices of the same boxing on every node
  int tensors = 1;              // > 1: a bucket of P -> B boxings (plan.fbs BoxingConf)
  int piece = -1;               // >= 0: this task makes only that output piece (plan.fbs)
  // A move (plan.fbs): the logical origin of each input piece, then of the
  // output piece, rank elements each; the output is copied from the inputs.
  std::vector<int64_t> origins;
};

struct TaskNode {
  plan::TaskKind kind = plan::TaskKind::Compute;
  std::string name;
  std::string op_type;
  Attrs attrs;
  int node = 0;
  int device = -1;  // -1 for io and comm threads
  int placement = 0;  // index into TaskGraph::placements (-1: none, e.g. the sink)
  uint64_t id = 0;  // actor id
  std::vector<int> inputs;   // regst indices, in op input order
  std::vector<int> outputs;  // regst indices, in op output order
  std::vector<Shape> logical_input_shapes;
  int64_t scratch_bytes = 0;
  SourceInfo source;
  VariableInfo variable;
  SinkInfo sink;
  BoxingInfo boxing;
};

struct TaskGraph {
  std::string job_name;
  int64_t steps = 0;
  int64_t global_batch = 0;
  int64_t log_every = 0;
  bool shuffle = false;
  uint64_t seed = 0;
  int num_nodes = 1;
  int devices_per_node = 1;
  std::vector<graph::Dataset> datasets;
  std::vector<std::string> placements;  // as written: [0] is the job's devices
  std::vector<TaskNode> tasks;
  std::vector<RegstNode> regsts;
};

}  // namespace rill::compiler
