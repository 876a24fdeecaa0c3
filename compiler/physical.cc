#include "compiler/physical.h"

#include <algorithm>
#include <map>

namespace rill::compiler {
namespace {

// Comm threads per node that cross-node boxing tasks share.
constexpr uint32_t kCommThreads = 4;

class Expander {
 public:
  Expander(const LogicalGraph& g, size_t bucket_bytes)
      : g_(g), parallel_(g.parallel()), per_node_(g.cluster.devices_per_node), bucket_bytes_(bucket_bytes) {}

  StatusOr<TaskGraph> run() {
    out_.job_name = g_.job_name;
    out_.global_batch = g_.global_batch;
    out_.log_every = g_.log_every;
    out_.shuffle = g_.shuffle;
    out_.seed = g_.seed;
    out_.num_nodes = g_.cluster.num_nodes;
    out_.devices_per_node = g_.cluster.devices_per_node;
    out_.datasets = g_.datasets;
    RILL_RETURN_IF_ERROR(add_sources());
    add_variables();
    add_computes();
    RILL_RETURN_IF_ERROR(add_boxings());
    add_sink();
    wire();
    return std::move(out_);
  }

 private:
  int node_of(int rank) const { return rank / per_node_; }
  int device_of(int rank) const { return rank % per_node_; }

  // Appends `task` with the actor id of its position on a thread of `type`
  // (for comm threads, number `comm_thread` of the task's node).
  int add_task(TaskNode task, DeviceType type, uint32_t comm_thread = 0) {
    uint32_t index = static_cast<uint32_t>(out_.tasks.size());
    uint32_t device = type == DeviceType::kCpu || type == DeviceType::kCuda ? static_cast<uint32_t>(task.device)
                      : type == DeviceType::kComm                           ? comm_thread
                                                                            : 0;
    task.id = ActorId::make(static_cast<uint32_t>(task.node), type, device, 0, index);
    out_.tasks.push_back(std::move(task));
    return static_cast<int>(index);
  }

  Region piece(const Shape& logical, const NdSbp& sbp, int rank) const {
    return piece_region(logical, sbp, g_.cluster.num_nodes, per_node_, rank);
  }

  int add_regst(int task, const std::string& name, const TensorMeta& logical, const NdSbp& sbp, int rank,
                bool is_model = false) {
    RegstNode r;
    r.name = name;
    r.producer = task;
    r.meta = TensorMeta{piece(logical.shape, sbp, rank).extent, logical.dtype};
    r.logical_shape = logical.shape;
    r.sbp = sbp;
    r.is_model = is_model;
    int id = static_cast<int>(out_.regsts.size());
    out_.regsts.push_back(std::move(r));
    out_.tasks[task].outputs.push_back(id);
    return id;
  }

  Status add_sources() {
    for (size_t d = 0; d < g_.datasets.size(); ++d) {
      const graph::Dataset& dataset = g_.datasets[d];
      std::vector<const InputNode*> members;
      for (const InputNode& in : g_.inputs)
        if (in.dataset == dataset.name) members.push_back(&in);
      for (const InputNode* in : members)
        if (!(in->sbp == members[0]->sbp))
          return invalid_argument("inputs '{}' ({}) and '{}' ({}) read dataset '{}' with different SBPs",
                                  members[0]->input.name, members[0]->sbp.to_string(), in->input.name,
                                  in->sbp.to_string(), dataset.name);
      const NdSbp& sbp = members[0]->sbp;
      for (int rank = 0; rank < parallel_; ++rank) {
        TaskNode task;
        task.kind = plan::TaskKind::Source;
        task.name = fmt::format("source:{}@{}", dataset.name, rank);
        task.node = node_of(rank);
        task.source.dataset = static_cast<int>(d);
        // Rows by node, then by device within the node's rows (NdSbp's
        // nesting); a split on one level only is that level's shards.
        const bool by_node = sbp.across.kind == Sbp::kSplit && g_.cluster.num_nodes > 1;
        const bool by_device = sbp.within.kind == Sbp::kSplit && per_node_ > 1;
        if (by_node) {
          task.source.shard = node_of(rank);
          task.source.num_shards = g_.cluster.num_nodes;
        }
        if (by_device) {
          (by_node ? task.source.sub_shard : task.source.shard) = device_of(rank);
          (by_node ? task.source.num_sub_shards : task.source.num_shards) = per_node_;
        }
        for (const InputNode* in : members) task.source.fields.push_back(in->input.field);
        int t = add_task(std::move(task), DeviceType::kIo);
        for (const InputNode* in : members) {
          const LogicalTensor* tensor = g_.find(in->input.name);
          pieces_[in->input.name].push_back(add_regst(t, in->input.name, tensor->meta, in->sbp, rank));
        }
      }
    }
    return {};
  }

  void add_variables() {
    for (const VariableNode& v : g_.variables) {
      const graph::Variable& var = v.variable;
      std::vector<int>& tasks = variable_tasks_.emplace_back();
      for (int rank = 0; rank < parallel_; ++rank) {
        TaskNode task;
        task.kind = plan::TaskKind::Variable;
        task.name = fmt::format("{}@{}", var.name, rank);
        task.node = node_of(rank);
        task.device = device_of(rank);
        task.variable.init_op = var.init.type;
        task.variable.init_attrs = var.init.attrs;
        if (!task.variable.init_attrs.has("shape"))
          task.variable.init_attrs.set("shape", std::vector<int64_t>(var.shape));
        task.variable.update_op = v.update_op;
        task.variable.update_attrs = v.update_attrs;
        task.variable.num_state = v.num_state;
        task.variable.offset = piece(var.shape, v.sbp, rank).origin;
        int t = add_task(std::move(task), g_.cluster.device_type);
        tasks.push_back(t);
        pieces_[var.name].push_back(add_regst(t, var.name, g_.find(var.name)->meta, v.sbp, rank, true));
      }
    }
  }

  void add_computes() {
    for (const OpNode& op : g_.ops) {
      std::vector<int>& tasks = op_tasks_.emplace_back();
      for (int rank = 0; rank < parallel_; ++rank) {
        TaskNode task;
        task.kind = plan::TaskKind::Compute;
        task.name = fmt::format("{}@{}", op.name, rank);
        task.op_type = op.type;
        task.attrs = op.attrs;
        task.node = node_of(rank);
        task.device = device_of(rank);
        std::vector<TensorMeta> physical_inputs;
        for (size_t k = 0; k < op.inputs.size(); ++k) {
          const TensorMeta& meta = g_.find(op.inputs[k])->meta;
          task.logical_input_shapes.push_back(meta.shape);
          physical_inputs.push_back({piece(meta.shape, op.input_sbp[k], rank).extent, meta.dtype});
        }
        if (op.def->scratch_bytes != nullptr)
          task.scratch_bytes = static_cast<int64_t>(op.def->scratch_bytes(op.attrs, physical_inputs));
        int t = add_task(std::move(task), g_.cluster.device_type);
        tasks.push_back(t);
        for (size_t k = 0; k < op.outputs.size(); ++k)
          pieces_[op.outputs[k]].push_back(add_regst(t, op.outputs[k], g_.find(op.outputs[k])->meta,
                                                     op.output_sbp[k], rank));
      }
    }
  }

  // Whether boxing `b` may join a bucket: a P -> B across nodes of an f32
  // tensor under bucket_bytes_ whose result no other boxing reads.
  bool bucketable(size_t b, const std::vector<bool>& read_by_boxing) const {
    const BoxingNode& box = g_.boxings[b];
    const LogicalTensor* t = g_.find(box.tensor);
    return g_.cluster.num_nodes > 1 && box.in == NdSbp(Sbp::partial_sum()) && box.out == NdSbp(Sbp::broadcast()) &&
           t->meta.dtype == DType::kF32 && t->meta.bytes() < bucket_bytes_ && !read_by_boxing[b];
  }

  // A conversion within each node to split or P pieces on CPU devices: one
  // task per device, on its thread, making that device's piece (the sums of
  // a P -> S are shared by the node's device threads).
  bool per_device(const BoxingNode& box) const {
    return per_node_ > 1 && g_.cluster.device_type == DeviceType::kCpu &&
           boxing_form(box.in, box.out, g_.cluster.num_nodes) == BoxingForm::kWithinNode &&
           box.out.within.kind != Sbp::kBroadcast;
  }

  // A boxing task of `box` over node `node`'s pieces.
  TaskNode boxing_task(const BoxingNode& box, std::string name, int node) const {
    TaskNode task;
    task.kind = plan::TaskKind::Boxing;
    task.name = std::move(name);
    task.node = node;
    task.boxing.in = box.in;
    task.boxing.out = box.out;
    task.boxing.parallel = parallel_;
    task.boxing.num_nodes = g_.cluster.num_nodes;
    task.boxing.local_pieces = per_node_;
    task.boxing.first_rank = node * per_node_;
    return task;
  }

  static std::string boxing_name(const BoxingNode& box) {
    return fmt::format("boxing:{}:{}->{}", box.tensor, box.in.to_string(), box.out.to_string());
  }

  void add_per_device_boxing(int b) {
    const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
    const TensorMeta& meta = g_.find(box.tensor)->meta;
    for (int rank = 0; rank < parallel_; ++rank) {
      TaskNode task = boxing_task(box, fmt::format("{}@{}", boxing_name(box), rank), node_of(rank));
      task.device = device_of(rank);
      task.boxing.piece = device_of(rank);
      const int t = add_task(std::move(task), DeviceType::kCpu);
      boxed_[static_cast<size_t>(b)].push_back(add_regst(t, box.tensor, meta, box.out, rank));
      unit_tasks_.push_back({t});
      unit_boxings_.push_back({b});
    }
  }

  // One boxing on one node: a task over every piece on node 0's comm thread.
  // Across nodes: one task per node over that node's pieces, on one of
  // kCommThreads comm threads, the same on every node (see order_comm_threads).
  // Small gradients' all-reduces are fused: consecutive bucketable boxings
  // (in that order) share one task and one all-reduce, up to bucket_bytes_.
  Status add_boxings() {
    const int nodes = g_.cluster.num_nodes;
    // The order in which boxings can become ready: by the position of the op
    // making their tensor (ops are in topological order), sources and
    // variables first. A boxing that depends on another comes after it.
    std::map<std::string, int> made_by;
    for (size_t o = 0; o < g_.ops.size(); ++o)
      for (const std::string& out : g_.ops[o].outputs) made_by[out] = static_cast<int>(o);
    std::vector<int> order(g_.boxings.size());
    for (size_t b = 0; b < order.size(); ++b) order[b] = static_cast<int>(b);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      auto key = [&](int x) {
        auto it = made_by.find(g_.boxings[static_cast<size_t>(x)].tensor);
        return it == made_by.end() ? -1 : it->second;
      };
      return key(a) < key(b);
    });
    std::vector<bool> read_by_boxing(g_.boxings.size(), false);
    for (const BoxingNode& box : g_.boxings)
      if (box.from >= 0) read_by_boxing[static_cast<size_t>(box.from)] = true;
    // Units of work in order: one boxing, or a bucket of several.
    std::vector<std::vector<int>> units;
    size_t bucket_bytes = 0;
    bool open = false;  // the last unit is a bucket still taking members
    for (int b : order) {
      const size_t bytes = g_.find(g_.boxings[static_cast<size_t>(b)].tensor)->meta.bytes();
      if (!bucketable(static_cast<size_t>(b), read_by_boxing)) {
        units.push_back({b});
        open = false;
        continue;
      }
      if (!open || bucket_bytes + bytes > bucket_bytes_) {
        units.push_back({});
        bucket_bytes = 0;
        open = true;
      }
      units.back().push_back(b);
      bucket_bytes += bytes;
    }
    boxed_.assign(g_.boxings.size(), {});
    uint32_t comm_position = 0;  // comm-thread units so far
    for (const std::vector<int>& unit : units) {
      const BoxingNode& box = g_.boxings[static_cast<size_t>(unit[0])];
      if (per_device(box)) {
        add_per_device_boxing(unit[0]);
        continue;
      }
      const size_t position = comm_position++;
      const std::string name =
          unit.size() > 1 ? fmt::format("bucket:{}+{}:P->B", box.tensor, unit.size() - 1) : boxing_name(box);
      std::vector<int> tasks;
      for (int node = 0; node < nodes; ++node) {
        TaskNode task = boxing_task(box, nodes > 1 ? fmt::format("{}@node{}", name, node) : name, node);
        task.boxing.collective_tag = nodes > 1 ? static_cast<int64_t>(unit[0]) + 1 : 0;
        task.boxing.tensors = static_cast<int>(unit.size());
        const uint32_t thread = nodes > 1 ? static_cast<uint32_t>(position % kCommThreads) : 0;
        const int t = add_task(std::move(task), DeviceType::kComm, thread);
        tasks.push_back(t);
        for (int b : unit) {
          const BoxingNode& member = g_.boxings[static_cast<size_t>(b)];
          const TensorMeta& meta = g_.find(member.tensor)->meta;
          // A B result is one regst that every device of the node reads.
          const int shared = member.out.within.kind == Sbp::kBroadcast
                                 ? add_regst(t, member.tensor, meta, member.out, node * per_node_)
                                 : -1;
          for (int d = 0; d < per_node_; ++d)
            boxed_[static_cast<size_t>(b)].push_back(
                shared >= 0 ? shared : add_regst(t, member.tensor, meta, member.out, node * per_node_ + d));
        }
      }
      if (boxing_exchanges(box.in, box.out, nodes))
        for (int t : tasks) out_.tasks[t].boxing.peers = tasks;
      unit_tasks_.push_back(tasks);
      unit_boxings_.push_back(unit);
    }
    if (nodes > 1) order_comm_threads();
    return {};
  }

  // A collective blocks its comm thread until its peers on the other nodes
  // join it, so the boxings sharing a thread must run in one order on every
  // node, or two nodes could each wait for a collective the other has queued
  // behind. Each thread's tasks t_1 .. t_k (in unit order) are chained by
  // control regsts: t_i writes one that t_i+1 reads; t_1's is read by t_k
  // too, and it has one slot, so t_1 of the next step waits for t_k of this
  // one. Every node then runs t_1, ..., t_k, t_1, ... and nothing else.
  void order_comm_threads() {
    std::map<std::pair<int, uint32_t>, std::vector<int>> chains;  // (node, thread) -> tasks in order
    for (const std::vector<int>& tasks : unit_tasks_)
      for (int t : tasks)
        if (ActorId::device_type(out_.tasks[t].id) == DeviceType::kComm)
          chains[{out_.tasks[t].node, ActorId::device(out_.tasks[t].id)}].push_back(t);
    for (auto& [where, chain] : chains) {
      if (chain.size() < 2) continue;
      int first = -1;
      for (size_t i = 0; i + 1 < chain.size(); ++i) {
        RegstNode r;
        r.name = "ctrl:" + out_.tasks[chain[i]].name;
        r.producer = chain[i];
        r.meta = TensorMeta{Shape{}, DType::kF32};
        r.sbp = NdSbp(Sbp::broadcast());
        r.ctrl = true;
        const int id = static_cast<int>(out_.regsts.size());
        out_.regsts.push_back(std::move(r));
        out_.tasks[chain[i]].outputs.push_back(id);
        if (i == 0) first = id;
        ctrl_inputs_[chain[i + 1]].push_back(id);
      }
      if (chain.size() > 2) ctrl_inputs_[chain.back()].push_back(first);
    }
  }

  void add_sink() {
    TaskNode task;
    task.kind = plan::TaskKind::Sink;
    task.name = "sink";
    task.node = 0;
    sink_task_ = add_task(std::move(task), DeviceType::kIo);
  }

  // The regst a consumer on `rank` reads for `tensor`, after boxing `boxing`.
  int read(const std::string& tensor, int boxing, int rank) const {
    return boxing >= 0 ? boxed_[boxing][rank] : pieces_.at(tensor)[rank];
  }

  void wire() {
    for (size_t v = 0; v < g_.variables.size(); ++v) {
      const VariableNode& var = g_.variables[v];
      if (var.grad.empty()) continue;
      for (int rank = 0; rank < parallel_; ++rank)
        out_.tasks[variable_tasks_[v][rank]].inputs.push_back(read(var.grad, var.grad_boxing, rank));
    }
    for (size_t o = 0; o < g_.ops.size(); ++o) {
      const OpNode& op = g_.ops[o];
      for (int rank = 0; rank < parallel_; ++rank)
        for (size_t k = 0; k < op.inputs.size(); ++k)
          out_.tasks[op_tasks_[o][rank]].inputs.push_back(read(op.inputs[k], op.input_boxing[k], rank));
    }
    for (size_t u = 0; u < unit_tasks_.size(); ++u)
      for (int t : unit_tasks_[u]) {
        TaskNode& task = out_.tasks[t];
        // Each member's node pieces (a shared B result once), then control regsts.
        for (int b : unit_boxings_[u]) {
          const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
          for (int d = 0; d < task.boxing.local_pieces; ++d) {
            const int regst = box.from >= 0 ? boxed_[static_cast<size_t>(box.from)][task.boxing.first_rank + d]
                                            : pieces_.at(box.tensor)[task.boxing.first_rank + d];
            if (d == 0 || regst != task.inputs.back()) task.inputs.push_back(regst);
          }
        }
        if (auto it = ctrl_inputs_.find(t); it != ctrl_inputs_.end())  // after the pieces
          task.inputs.insert(task.inputs.end(), it->second.begin(), it->second.end());
      }
    TaskNode& sink = out_.tasks[sink_task_];
    for (const Reported& r : g_.reported) {
      for (int rank = 0; rank < parallel_; ++rank) {
        int regst = read(r.tensor, r.boxing, rank);
        if (rank > 0 && regst == read(r.tensor, r.boxing, rank - 1)) continue;  // a node's shared B result
        sink.inputs.push_back(regst);
        sink.sink.names.push_back(r.name);
        sink.sink.partial.push_back(out_.regsts[regst].sbp == NdSbp(Sbp::partial_sum()));
      }
    }
    for (const Reported& f : g_.fetched) {  // rank 0's piece, B (whole)
      sink.inputs.push_back(read(f.tensor, f.boxing, 0));
      sink.sink.fetch.push_back(f.tensor);
    }
  }

  const LogicalGraph& g_;
  const int parallel_;
  const int per_node_;
  const size_t bucket_bytes_;
  TaskGraph out_;
  std::map<std::string, std::vector<int>> pieces_;  // tensor -> regst by rank
  std::vector<std::vector<int>> boxed_;             // boxing node -> regst by rank
  std::vector<std::vector<int>> variable_tasks_;
  std::vector<std::vector<int>> op_tasks_;
  std::vector<std::vector<int>> unit_tasks_;      // in order: a unit's tasks (per node, or one per-device task)
  std::vector<std::vector<int>> unit_boxings_;    // the boxing nodes each unit runs
  std::map<int, std::vector<int>> ctrl_inputs_;  // boxing task -> control regsts it reads
  int sink_task_ = -1;
};

}  // namespace

StatusOr<TaskGraph> expand(const LogicalGraph& graph, size_t bucket_bytes) {
  return Expander(graph, bucket_bytes).run();
}

}  // namespace rill::compiler
