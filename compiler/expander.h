// The physical expander's one class, shared by the files that build its
// parts (compiler/physical.h says what expansion makes): physical.cc the
// tasks of sources, variables, ops and the sink and their wiring,
// physical_boxing.cc boxing tasks, buckets and the comm threads' order,
// physical_moves.cc moves between placements. Internal to the compiler.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/collective_scratch.h"
#include "compiler/checkpoint_writers.h"
#include "compiler/logical_graph.h"
#include "compiler/numbering.h"
#include "compiler/physical.h"
#include "compiler/task_graph.h"

namespace rill::compiler {

// Comm threads per node that cross-node boxing tasks share; on GPUs, moves
// between placements run on one more (comm thread kCommThreads), which never
// waits for a collective. A pserver's threads serving the trainers follow.
constexpr uint32_t kCommThreads = 4;

// What a pserver's task does for the trainers (see Expander::thread_of).
enum class Rpc : uint8_t { kNone, kSend, kGet, kPrefetch };

class Expander {
 public:
  Expander(const LogicalGraph& g, size_t bucket_bytes, int node, GradientCompression compression)
      : g_(g), bucket_bytes_(bucket_bytes), compression_(compression) {
    out_.node = node;
    if (compression_.kind != graph::Compression::kNone) mark_gradient_boxings();
    for (const VariableNode& v : g_.variables)  // the pservers: the nodes holding blocks
      if (v.variable.block_of)
        for (int n : at(v.placement).nodes) pserver_nodes_.insert(n);
  }

  StatusOr<TaskGraph> run();

 private:
  const graph::Placement& at(int placement) const { return g_.placement(placement); }

  size_t stored_ranks(const graph::Placement& p) const {
    if (out_.node < 0) return static_cast<size_t>(p.parallel());
    return std::find(p.nodes.begin(), p.nodes.end(), out_.node) != p.nodes.end() ? static_cast<size_t>(p.per_node())
                                                                                  : 0;
  }

  struct Thread {
    DeviceType type;
    uint32_t device;  // a device's number, or a comm thread's
  };

  // Numbers a task of `node` on `thread` (stored as `build()` makes it where
  // the numbering keeps it; see compiler/numbering.h).
  template <typename Build>
  Numbering::Task add_task(int node, Thread thread, bool everywhere, Build&& build) {
    return num_.task(node, thread.type, thread.device, everywhere, std::forward<Build>(build));
  }

  // The thread of a task on `device` of `node` (placement `p`) that does
  // `rpc` for the trainers: on a pserver node, one of the threads it gives
  // to that service (distributed.rpc_*_thread_num; comm threads after
  // kCommThreads): the sums of the trainers' gradient pieces and a lookup
  // table's row gradients (sends), the blocks' variables, whose updated
  // values the trainers get (gets), and the lookups with their ids in and
  // rows out (prefetches). Each pool is dealt round-robin in the order the
  // tasks are made, which every node's compile follows. Elsewhere, and on
  // GPUs (whose tasks keep their stream), the device's own thread.
  Thread thread_of(const graph::Placement& p, int node, int device, Rpc rpc);

  // The handle of referenced regst `ref` (Numbering::regst), piece `rank`
  // (of placement `p`, in `sbp`) of `tensor`: a counted one is stored on
  // first use, with no producer task (tasks that read across nodes are
  // stored on every node). `as`: the logical tensor it is a piece of, when
  // not `tensor` (a collective's boxing).
  int handle(int64_t ref, const std::string& tensor, const NdSbp& sbp, int placement, int rank,
             const TensorMeta* as = nullptr);

  static Region piece(const Shape& logical, const NdSbp& sbp, const graph::Placement& p, int rank) {
    return piece_region(logical, sbp, p.num_nodes(), p.per_node(), rank);
  }

  // The regst of piece `rank` (of placement `p`) of a tensor, written by
  // `task`: its reference (see handle()).
  int64_t add_regst(const Numbering::Task& task, const std::string& name, const TensorMeta& logical,
                    const NdSbp& sbp, const graph::Placement& p, int rank, bool is_model = false) {
    return num_.regst(task, sbp, is_model, [&] {
      return region_regst(name, logical, sbp, piece(logical.shape, sbp, p, rank), is_model);
    });
  }

  RegstNode region_regst(const std::string& name, const TensorMeta& logical, const NdSbp& sbp, const Region& region,
                         bool is_model = false) const;

  // An async pserver's block (one piece, on a pserver, its gradient made on
  // the trainers): a lane per trainer rank; 1 otherwise.
  int variable_lanes(const VariableNode& v) const {
    if (!g_.async_pserver || !v.variable.block_of || v.grad.empty() || at(v.placement).parallel() != 1) return 1;
    return at(g_.find(v.grad)->placement).parallel();
  }

  // Whether `tensor` is the gradient of a variable with lanes.
  bool lane_gradient(const std::string& tensor) const {
    for (const VariableNode& v : g_.variables)
      if (v.grad == tensor && variable_lanes(v) > 1) return true;
    return false;
  }

  // How often `tensor` is made in a step: micro_batches times, or once.
  int rate(const std::string& tensor) const {
    return g_.find(tensor)->per_micro ? static_cast<int>(g_.micro_batches) : 1;
  }

  // Sources: one set per dataset and (placement, SBP) its inputs are read
  // in; each reads only its inputs' fields. Every set draws the same rows
  // for a step (BatchSampler: one seeded order, rows of the global batch),
  // so labels read where the loss is match the images read elsewhere.
  void add_sources();

  void add_source_set(int d, size_t set, const std::vector<const InputNode*>& members);

  // The least OpDef::index_bound of the ops reading `tensor` (0: none), and
  // the op whose it is.
  struct IndexBound {
    int64_t bound = 0;
    std::string reader;
  };
  IndexBound index_bound(const std::string& tensor) const;

  void add_variables();

  void add_computes();
  // The rank whose piece of input `k` of `op` rank `rank` reads: its own,
  // or under ring attention the one OpNode::ring_steps places back.
  int source_rank(const OpNode& op, size_t k, int rank) const;

  // Whether boxing `b` may join a bucket: a P -> B across nodes (or a
  // device collective) of an f32 tensor under bucket_bytes_ whose result no
  // other boxing reads.
  bool bucketable(size_t b, const std::vector<bool>& read_by_boxing) const;

  // A conversion within each node to split or P pieces on CPU devices: one
  // task per device, on its thread, making that device's piece (the sums of
  // a P -> S are shared by the node's device threads).
  bool per_device(const BoxingNode& box) const;

  // A boxing task of `box` over the pieces on node `index` of its placement.
  TaskNode boxing_task(const BoxingNode& box, std::string name, int index) const;

  static std::string boxing_name(const BoxingNode& box) {
    // A collective op's boxing reads the pieces as another tensor: named apart.
    return fmt::format("{}:{}:{}->{}", box.as ? "collective" : "boxing", box.tensor, box.in.to_string(),
                       box.out.to_string());
  }

  // The regst holding piece `rank` (of its placement) of what boxing `b`
  // reads: a reference (see handle()).
  int64_t boxing_input(const BoxingNode& box, int rank) const {
    return box.from >= 0 ? boxed_[static_cast<size_t>(box.from)][static_cast<size_t>(rank)]
                         : pieces_.at(box.tensor)[static_cast<size_t>(rank)];
  }

  // Whether boxing `b` reads what a move made: pieces read as they are may
  // live on another node.
  bool reads_move(int b) const {
    const int from = g_.boxings[static_cast<size_t>(b)].from;
    return from >= 0 && g_.boxings[static_cast<size_t>(from)].move();
  }
  bool reads_move(const OpNode& op) const {
    return std::any_of(op.input_boxing.begin(), op.input_boxing.end(),
                       [&](int b) { return b >= 0 && g_.boxings[static_cast<size_t>(b)].move(); });
  }

  // The inputs of a task of boxing unit `unit` over pieces first ..
  // first + count - 1: each member's pieces (a shared B piece once).
  std::vector<int> boxing_inputs(const std::vector<int>& unit, int first, int count);

  void add_per_device_boxing(int b);

  // Under train.nccl, what device collective does `box`, if one does
  // (axis_collective, kernels/tensor.h): one task per device on its thread,
  // each a rank of a communicator (Plan.comm_groups) among every device of
  // the placement (a 1-D boxing), the devices of its node (`within`
  // changes), or its lane (`across` changes: device d of every node). A
  // reduce-scatter or all-gather needs a slice of its axis for each of the
  // communicator's ranks (rank r's block the r-th, split as pieces are).
  std::optional<AxisCollective> device_collective(const BoxingNode& box) const;
  Status add_device_collective(const std::vector<int>& unit, const std::string& name, AxisCollective collective);
  // Under train.nccl, whether each device makes `box` from its own piece
  // (own_piece_scope, kernels/tensor.h: B -> S, B -> P, S -> P on one axis):
  // one task per device on its thread, reading that piece alone.
  bool own_piece(const BoxingNode& box) const;
  void add_own_piece_boxing(int b);
  // The index of the communicator of `ranks` (node, device), made on first use.
  int comm_group(std::vector<std::pair<int, int>> ranks, DeviceType type);

  // A task copying the parts of `sources` (regsts with their logical
  // regions) that fall in `target` into one regst holding `target`, on
  // `device` of `node` (on CPU its thread; on GPUs the node's move thread,
  // which never waits for a collective). Returns the regst.
  int add_copy_task(const BoxingNode& box, std::string name, int placement, int node, int device,
                    const std::vector<std::pair<int, Region>>& sources, const Region& target, const NdSbp& sbp,
                    Rpc rpc = Rpc::kNone);

  // A move: each piece on the target placement is made from the source
  // pieces it overlaps (one replica of each distinct piece, the nearest:
  // same device, then same node, then spread by target node, so a node
  // receives each part once). A source piece that is exactly the target
  // piece is read as it is (no task); one that only overlaps it and lives
  // on another node is sliced there first, so only the overlap crosses; the
  // parts are assembled on the target device, unless the one part is the
  // whole piece. Partial sums (pserver mode) are not replicas: each target
  // piece adds up its overlap with every source piece.
  void add_move(int b);

  // One boxing on one node: a task over every piece on node 0's comm thread.
  // Across nodes: one task per node over that node's pieces, on one of
  // kCommThreads comm threads, the same on every node (see order_comm_threads).
  // Small gradients' all-reduces are fused: consecutive bucketable boxings
  // (in that order) share one task and one all-reduce, up to bucket_bytes_.
  // Moves between placements are copy tasks outside that order.
  Status add_boxings();

  // A collective blocks its comm thread until its peers on the other nodes
  // join it, so the boxings sharing a thread must run in one order on every
  // node, or two nodes could each wait for a collective the other has queued
  // behind. Each thread's tasks t_1 .. t_k (in unit order) are chained by
  // control regsts: t_i writes one that t_i+1 reads; t_1's is read by t_k
  // too, and it has one slot, so t_1 of the next step waits for t_k of this
  // one. Every node then runs t_1, ..., t_k, t_1, ... and nothing else.
  // A device collective blocks its device's stream alike: each device
  // thread's collective tasks are chained the same way, in the same unit
  // order, so every rank of a communicator enqueues its calls in one order.
  void order_comm_threads();

  void add_sink();

  // The regst a consumer on `rank` (of its placement) reads for `tensor`,
  // after boxing `boxing`.
  int read(const std::string& tensor, int boxing, int rank);

  Status wire();

  const LogicalGraph& g_;
  const size_t bucket_bytes_;
  const GradientCompression compression_;
  // train.compression: the boxings that carry a variable's gradient to its
  // update (its grad_boxing and those that one reads from); empty when off.
  std::vector<bool> gradient_boxing_;
  void mark_gradient_boxings();
  // Whether a unit of boxings across nodes sends compressed with error
  // feedback: gradients only, f32 sums P -> B (BoxingConf.compress).
  bool compressed(const std::vector<int>& unit) const;
  TaskGraph out_;
  // References (handle() says what they are) by rank.
  std::map<std::string, std::vector<int64_t>> pieces_;  // tensor -> its pieces
  std::vector<std::vector<int64_t>> boxed_;             // boxing node -> its output pieces
  CheckpointWriters checkpoint_writers_;                 // which rank writes each variable piece
  Numbering num_{out_};
  std::vector<std::vector<int>> variable_tasks_;
  // An async pserver's block: its model regst per lane (trainer rank).
  std::map<std::string, std::vector<int64_t>> model_lanes_;
  // A move of an async block's gradient: no task; the pieces of each lane.
  std::map<int, std::vector<int>> lane_inputs_;
  std::set<int> pserver_nodes_;                    // nodes holding variable blocks
  std::map<std::pair<int, Rpc>, int> rpc_dealt_;  // (pserver node, service) -> tasks dealt to its threads
  std::vector<std::vector<int>> op_tasks_;
  struct ChainMember {  // a task of a boxing unit, on `thread` of `node`
    int node;
    Thread thread;
    Numbering::Task task;
  };
  std::vector<std::vector<ChainMember>> chain_units_;  // boxing units with a collective, in order
  // The next tag of a lane communicator's call after its first lane (that
  // one has its unit's, as every boxing): past every boxing's.
  int64_t next_tag_ = 0;
  int sink_task_ = -1;
};

}  // namespace rill::compiler
