// TaskGraph: the physical graph the last passes build and the plan writer
// emits. The passes address tasks and regsts by their position in `tasks` and
// `regsts` (a handle). Each also has a global number, the same on every node:
// a task's is the index in its actor id, a regst's is its id. Numbers are
// handed out in one fixed order over the whole cluster; a graph built for one
// node (`node` >= 0) stores only what that node runs (plus the few tasks that
// read across nodes, whose readers every node must know and whose Send/Recv
// pairs, on GPUs, every node must number alike) and
// only counts the rest, so its ids are the whole plan's.
// A value owned by one compile() call.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "base/actor_id.h"
#include "base/collective_scratch.h"
#include "compiler/compiler.h"
#include "graph/job.h"
#include "kernels/attrs.h"
#include "kernels/tensor.h"

namespace rill::compiler {

struct RegstNode {
  std::string name;            // the logical tensor it holds
  int64_t id = -1;             // global
  int node = 0;                // the producer's
  int producer = -1;           // task handle; -1: a task of another node (not stored)
  uint64_t producer_id = 0;    // its actor id
  std::vector<int> consumers;  // task handles, sorted (regst planning)
  int register_num = 1;        // set by regst planning
  TensorMeta meta;             // this piece
  Shape logical_shape;
  NdSbp sbp;
  bool is_model = false;
  bool ctrl = false;  // a control regst: orders its producer before its consumers; its bytes are unused
  int device = -1;  // the cuda device whose memory holds it; -1: host (set by insert_copies)
  int readies_per_step = 1;  // micro_batches for what is made per micro-batch, else 1
  int stage = -1;  // its tensor's pipeline stage (LogicalTensor::stage): the forward pass's, per micro-batch
  bool after_updates = false;  // its tensor's LogicalTensor::after_updates
};

// What a task does, by kind: one of these, each naming its plan::TaskKind.
// A new kind is a new alternative of TaskInfo, and every pass that visits
// it (the plan writer first) fails to compile until it handles it.

struct ComputeInfo {  // an op's kernel
  static constexpr plan::TaskKind kKind = plan::TaskKind::Compute;
  std::string op_type;
  Attrs attrs;
  std::vector<Shape> logical_input_shapes;
  std::vector<Shape> input_offsets;  // of each input piece in its logical tensor
  int64_t scratch_bytes = 0;
};

struct SourceInfo {
  static constexpr plan::TaskKind kKind = plan::TaskKind::Source;
  int dataset = 0;  // index into TaskGraph::datasets
  std::vector<std::string> fields;
  int shard = 0;  // rows: part `shard` of num_shards, then part `sub_shard` of that
  int num_shards = 1;
  int sub_shard = 0;
  int num_sub_shards = 1;
  // Per field: the bound its values must lie under (0: none) and the op
  // whose bound it is (SourceConf.index_bounds).
  std::vector<int64_t> index_bounds;
  std::vector<std::string> index_readers;
};

struct VariableInfo {
  static constexpr plan::TaskKind kKind = plan::TaskKind::Variable;
  std::string init_op;
  Attrs init_attrs;
  std::string update_op;  // empty: not trained
  Attrs update_attrs;
  int num_state = 0;
  std::vector<int64_t> offset;
  std::optional<graph::BlockOf> block_of;  // parameter servers: a block of another variable
  int lanes = 1;                           // async pservers: a gradient and a model per trainer rank
  float dc_asgd_lambda = 0;
  bool replica = false;  // a lower rank holds the same piece (VariableConf.replica)
  bool checkpoint_writer = false;  // this rank writes the piece into checkpoints (VariableConf.checkpoint_writer)
};

struct SinkInfo {
  static constexpr plan::TaskKind kKind = plan::TaskKind::Sink;
  std::vector<std::string> names;
  std::vector<bool> partial;
  std::vector<std::string> fetch;  // after the reported inputs: one whole piece each
  int ranks = 0;  // the mirrored view: metrics per rank, fetch "tensor@rank" (SinkConf.ranks)
};

struct BoxingInfo {
  static constexpr plan::TaskKind kKind = plan::TaskKind::Boxing;
  NdSbp in;
  NdSbp out;
  int parallel = 1;         // pieces over all nodes
  int num_nodes = 1;        // > 1: one task per node, each with its local pieces
  int local_pieces = 1;
  int first_rank = 0;
  int64_t collective_tag = 0;   // 0: no collective among nodes
  std::vector<uint64_t> peers;  // actor ids of the same boxing on every node
  int tensors = 1;              // > 1: a bucket of P -> B boxings (plan.fbs BoxingConf)
  int piece = -1;               // >= 0: this task makes only that output piece (plan.fbs)
  // A move (plan.fbs): the logical origin of each input piece, then of the
  // output piece, rank elements each; the output is copied from the inputs.
  std::vector<int64_t> origins;
  uint8_t reduce_op = 0;  // how P pieces combine (plan.fbs BoxingConf)
  int comm_group = -1;    // >= 0: one rank of a device collective (plan.fbs BoxingConf)
  bool own = false;       // made by each device from its own piece (plan.fbs BoxingConf)
  uint8_t compress = 0;   // gradients across nodes sent compressed (plan.fbs BoxingConf)
  int compress_rank = 0;
  int64_t compress_start = 0;  // steps before it all-reduce uncompressed (plan.fbs BoxingConf)
};

// A device collective's communicator and its calls in order (plan.fbs
// CommGroup): every node's graph holds every group whole.
struct CommCall {
  std::string name;
  int64_t tag = 0;
  CollectiveCall op = CollectiveCall::kAllReduce;
  int tensors = 1;
  int64_t bytes = 0;
};
struct CommGroup {
  std::vector<std::pair<int, int>> ranks;  // (node, device)
  std::vector<CommCall> calls;
  bool cuda = false;
};

// Regsts crossing nodes through host memory where a GPU holds an end
// (compiler/transfers.h), and copies between a GPU and the host.
struct SendInfo {
  static constexpr plan::TaskKind kKind = plan::TaskKind::Send;
};
struct RecvInfo {
  static constexpr plan::TaskKind kKind = plan::TaskKind::Recv;
};
struct CopyInfo {
  static constexpr plan::TaskKind kKind = plan::TaskKind::Copy;
};

using TaskInfo =
    std::variant<ComputeInfo, SourceInfo, VariableInfo, SinkInfo, BoxingInfo, SendInfo, RecvInfo, CopyInfo>;

struct TaskNode {
  TaskInfo info;
  std::string name;
  int node = 0;
  int device = -1;  // -1 for io and comm threads
  int placement = 0;  // index into TaskGraph::placements (-1: none, e.g. the sink)
  uint64_t id = 0;  // actor id
  // micro_batches when it acts once per micro-batch (it reads or makes what
  // is made per micro-batch; an accumulate op), else 1.
  int acts_per_step = 1;
  std::vector<int> inputs;   // regst indices, in op input order
  std::vector<int> outputs;  // regst indices, in op output order

  plan::TaskKind kind() const {
    return std::visit([](const auto& i) { return std::decay_t<decltype(i)>::kKind; }, info);
  }
  template <typename Info>
  bool is() const {
    return std::holds_alternative<Info>(info);
  }
  // The task's info of its kind (std::get: a wrong kind throws).
  ComputeInfo& compute() { return std::get<ComputeInfo>(info); }
  SourceInfo& source() { return std::get<SourceInfo>(info); }
  VariableInfo& variable() { return std::get<VariableInfo>(info); }
  SinkInfo& sink() { return std::get<SinkInfo>(info); }
  BoxingInfo& boxing() { return std::get<BoxingInfo>(info); }
  const BoxingInfo& boxing() const { return std::get<BoxingInfo>(info); }
};

struct TaskGraph {
  std::string job_name;
  std::string natural_order_because;  // LogicalGraph's: why rings stay unbalanced
  int64_t steps = 0;
  int64_t global_batch = 0;
  int64_t micro_batches = 1;
  graph::Schedule schedule = graph::Schedule::k1f1b;  // train.schedule
  bool allow_tf32 = false;        // train.allow_tf32
  bool reuse_memory = true;       // train.reuse_memory
  bool cuda_graphs = true;        // train.cuda_graphs
  int stages = 1;                 // pipeline stages of the forward pass
  int64_t log_every = 0;
  bool shuffle = false;
  bool rows_by_rank = false;  // the mirrored view: sources read each rank's own rows (plan.fbs SourceConf)
  uint64_t seed = 0;
  int num_nodes = 1;
  int devices_per_node = 1;
  std::vector<graph::Dataset> datasets;
  std::vector<std::string> placements;  // as written: [0] is the job's devices
  std::vector<TaskNode> tasks;
  std::vector<RegstNode> regsts;
  std::vector<CommGroup> comm_groups;
  int node = -1;             // >= 0: the graph of that node (see above)
  uint32_t next_task = 0;    // global numbers handed out so far
  int64_t next_regst = 0;

  bool stores(int task_node) const { return node < 0 || task_node == node; }

  // Appends `task` with the next global number; its actor id is made of its
  // node, `type` and `device` (a comm thread's number for comm tasks).
  // Returns its handle.
  int add_task(TaskNode task, DeviceType type, uint32_t device) {
    task.id = ActorId::make(static_cast<uint32_t>(task.node), type, device, 0, next_task++);
    tasks.push_back(std::move(task));
    return static_cast<int>(tasks.size() - 1);
  }
  // Numbers a task another node runs; returns its actor id.
  uint64_t count_task(int task_node, DeviceType type, uint32_t device) {
    return ActorId::make(static_cast<uint32_t>(task_node), type, device, 0, next_task++);
  }
  // Appends `r` as an output of task `producer` with the next global id;
  // returns its handle.
  int add_regst(RegstNode r, int producer) {
    r.id = next_regst++;
    r.producer = producer;
    r.node = tasks[static_cast<size_t>(producer)].node;
    r.producer_id = tasks[static_cast<size_t>(producer)].id;
    regsts.push_back(std::move(r));
    const int handle = static_cast<int>(regsts.size() - 1);
    tasks[static_cast<size_t>(producer)].outputs.push_back(handle);
    return handle;
  }
};

}  // namespace rill::compiler
