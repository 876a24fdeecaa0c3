#include "compiler/physical.h"

#include "compiler/boxing_units.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "compiler/optimizer.h"

namespace rill::compiler {
namespace {

// Comm threads per node that cross-node boxing tasks share; on GPUs, moves
// between placements run on one more (comm thread kCommThreads), which never
// waits for a collective. A pserver's threads serving the trainers follow.
constexpr uint32_t kCommThreads = 4;

// What a pserver's task does for the trainers (see Expander::thread_of).
enum class Rpc : uint8_t { kNone, kSend, kGet, kPrefetch };

class Expander {
 public:
  Expander(const LogicalGraph& g, size_t bucket_bytes, int node) : g_(g), bucket_bytes_(bucket_bytes) {
    out_.node = node;
    for (const VariableNode& v : g_.variables)  // the pservers: the nodes holding blocks
      if (v.variable.block_of)
        for (int n : at(v.placement).nodes) pserver_nodes_.insert(n);
  }

  StatusOr<TaskGraph> run() {
    out_.job_name = g_.job_name;
    out_.global_batch = g_.global_batch;
    out_.micro_batches = g_.micro_batches;
    out_.schedule = g_.schedule;
    out_.allow_tf32 = g_.allow_tf32;
    out_.stages = g_.stages;
    out_.log_every = g_.log_every;
    out_.shuffle = g_.shuffle;
    out_.rows_by_rank = g_.mirrored;
    out_.seed = g_.seed;
    out_.num_nodes = g_.cluster.num_nodes;
    out_.devices_per_node = g_.cluster.devices_per_node;
    out_.datasets = g_.datasets;
    // Room for what the ops, variables and boxings make (about; the
    // transfers add more later): tasks are large, and regrowing the vectors
    // moved each several times.
    size_t estimate = 0, counted = 0;
    for (const OpNode& op : g_.ops) {
      estimate += stored_ranks(at(op.placement));
      counted += op.outputs.size() * static_cast<size_t>(at(op.placement).parallel());
    }
    for (const VariableNode& v : g_.variables) {
      estimate += stored_ranks(at(v.placement));
      counted += static_cast<size_t>(at(v.placement).parallel());
    }
    for (const BoxingNode& b : g_.boxings) {
      estimate += stored_ranks(at(b.to));
      counted += static_cast<size_t>(at(b.to).parallel());
    }
    out_.tasks.reserve(estimate + estimate / 4);
    out_.regsts.reserve(estimate + estimate / 2);
    if (out_.node >= 0) counted_.reserve(counted);
    for (const graph::Placement& p : g_.placements) out_.placements.push_back(p.to_string());
    add_sources();
    add_variables();
    add_computes();
    RILL_RETURN_IF_ERROR(add_boxings());
    add_sink();
    RILL_RETURN_IF_ERROR(wire());
    return std::move(out_);
  }

 private:
  const graph::Placement& at(int placement) const { return g_.placement(placement); }

  size_t stored_ranks(const graph::Placement& p) const {
    if (out_.node < 0) return static_cast<size_t>(p.parallel());
    return std::find(p.nodes.begin(), p.nodes.end(), out_.node) != p.nodes.end() ? static_cast<size_t>(p.per_node())
                                                                                  : 0;
  }

  // Appends `task` with the actor id of its position on a thread of `type`
  // (for comm threads, number `comm_thread` of the task's node).
  int add_task(TaskNode task, DeviceType type, uint32_t comm_thread = 0) {
    const uint32_t device = thread_device(task.device, type, comm_thread);
    return out_.add_task(std::move(task), type, device);
  }

  struct Thread {
    DeviceType type;
    uint32_t device;  // a device's number, or a comm thread's
  };
  int add_task(TaskNode task, Thread thread) { return out_.add_task(std::move(task), thread.type, thread.device); }

  // The thread of a task on `device` of `node` (placement `p`) that does
  // `rpc` for the trainers: on a pserver node, one of the threads it gives
  // to that service (distributed.rpc_*_thread_num; comm threads after
  // kCommThreads): the sums of the trainers' gradient pieces and a lookup
  // table's row gradients (sends), the blocks' variables, whose updated
  // values the trainers get (gets), and the lookups with their ids in and
  // rows out (prefetches). Each pool is dealt round-robin in the order the
  // tasks are made, which every node's compile follows. Elsewhere, and on
  // GPUs (whose tasks keep their stream), the device's own thread.
  Thread thread_of(const graph::Placement& p, int node, int device, Rpc rpc) {
    if (rpc == Rpc::kNone || p.type != DeviceType::kCpu || pserver_nodes_.count(node) == 0)
      return {p.type, static_cast<uint32_t>(device)};
    const int sends = g_.rpc_send_threads, gets = g_.rpc_get_threads, prefetches = g_.rpc_prefetch_threads;
    const int first = static_cast<int>(kCommThreads) + 1 + (rpc == Rpc::kSend ? 0 : rpc == Rpc::kGet ? sends : sends + gets);
    const int pool = rpc == Rpc::kSend ? sends : rpc == Rpc::kGet ? gets : prefetches;
    int& dealt = rpc_dealt_[{node, rpc}];
    return {DeviceType::kComm, static_cast<uint32_t>(first + dealt++ % pool)};
  }

  static uint32_t thread_device(int device, DeviceType type, uint32_t comm_thread) {
    return type == DeviceType::kCpu || type == DeviceType::kCuda ? static_cast<uint32_t>(device)
           : type == DeviceType::kComm                           ? comm_thread
                                                                 : 0;
  }

  // A regst of a task another node runs, when the graph is one node's: only
  // numbered. A reference to a regst is its handle (>= 0) or ~index here.
  // `sbp`: the producer's, when a reader may name it otherwise (an op's
  // output in an SBP that is the same pieces on its placement, B or S on
  // one device): the stored stub keeps the producer's, as the whole plan.
  struct Counted {
    int64_t id;
    uint64_t producer_id;
    std::optional<NdSbp> sbp;
    bool is_model = false;
  };
  int64_t count_regst(uint64_t producer_id, std::optional<NdSbp> sbp = std::nullopt, bool is_model = false) {
    counted_.push_back({out_.next_regst++, producer_id, std::move(sbp), is_model});
    return ~static_cast<int64_t>(counted_.size() - 1);
  }

  // The handle of referenced regst `ref`, piece `rank` (of placement `p`,
  // in `sbp`) of `tensor`: a counted one is stored on first use, with no
  // producer task (tasks that read across nodes are stored on every node).
  // `as`: the logical tensor it is a piece of, when not `tensor` (a collective's boxing).
  int handle(int64_t ref, const std::string& tensor, const NdSbp& sbp, int placement, int rank,
             const TensorMeta* as = nullptr) {
    if (ref >= 0) return static_cast<int>(ref);
    auto [it, fresh] = stored_.try_emplace(ref, -1);
    if (!fresh) return it->second;
    const Counted& c = counted_[static_cast<size_t>(~ref)];
    const TensorMeta& logical = as != nullptr ? *as : g_.find(tensor)->meta;
    RegstNode r;
    r.name = tensor;
    r.id = c.id;
    r.node = static_cast<int>(ActorId::node(c.producer_id));
    r.producer_id = c.producer_id;
    r.meta = TensorMeta{piece(logical.shape, sbp, at(placement), rank).extent, logical.dtype};
    r.logical_shape = logical.shape;
    r.sbp = c.sbp.value_or(sbp);
    r.is_model = c.is_model;
    r.readies_per_step = rate(tensor);
    r.stage = g_.find(tensor)->stage;
    r.after_updates = g_.find(tensor)->after_updates;
    out_.regsts.push_back(std::move(r));
    it->second = static_cast<int>(out_.regsts.size() - 1);
    return it->second;
  }

  static Region piece(const Shape& logical, const NdSbp& sbp, const graph::Placement& p, int rank) {
    return piece_region(logical, sbp, p.num_nodes(), p.per_node(), rank);
  }

  // The regst of piece `rank` (of placement `p`) of a tensor, written by `task`.
  int add_regst(int task, const std::string& name, const TensorMeta& logical, const NdSbp& sbp,
                const graph::Placement& p, int rank, bool is_model = false) {
    return add_region_regst(task, name, logical, sbp, piece(logical.shape, sbp, p, rank), is_model);
  }

  int add_region_regst(int task, const std::string& name, const TensorMeta& logical, const NdSbp& sbp,
                       const Region& region, bool is_model = false) {
    RegstNode r;
    r.name = name;
    r.meta = TensorMeta{region.extent, logical.dtype};
    r.logical_shape = logical.shape;
    r.sbp = sbp;
    r.is_model = is_model;
    r.readies_per_step = rate(name);
    r.stage = g_.find(name)->stage;
    r.after_updates = g_.find(name)->after_updates;
    return out_.add_regst(std::move(r), task);
  }

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
  void add_sources() {
    for (size_t d = 0; d < g_.datasets.size(); ++d) {
      const graph::Dataset& dataset = g_.datasets[d];
      std::vector<std::vector<const InputNode*>> sets;
      for (const InputNode& in : g_.inputs) {
        if (in.dataset != dataset.name) continue;
        auto same = [&](const std::vector<const InputNode*>& set) {
          return set[0]->placement == in.placement && set[0]->sbp == in.sbp;
        };
        auto it = std::find_if(sets.begin(), sets.end(), same);
        if (it == sets.end()) sets.push_back({&in});
        else it->push_back(&in);
      }
      for (size_t k = 0; k < sets.size(); ++k) add_source_set(static_cast<int>(d), k, sets[k]);
    }
  }

  void add_source_set(int d, size_t set, const std::vector<const InputNode*>& members) {
    const graph::Dataset& dataset = g_.datasets[static_cast<size_t>(d)];
    const std::string name = set == 0 ? dataset.name : fmt::format("{}.{}", dataset.name, set);
    const NdSbp& sbp = members[0]->sbp;
    const graph::Placement& p = at(members[0]->placement);
    std::vector<std::vector<int64_t>*> outs;
    for (const InputNode* in : members) outs.push_back(&pieces_[in->input.name]);
    for (int rank = 0; rank < p.parallel(); ++rank) {
      if (!out_.stores(p.node_of(rank))) {
        const uint64_t id = out_.count_task(p.node_of(rank), DeviceType::kIo, 0);
        for (std::vector<int64_t>* out : outs) out->push_back(count_regst(id));
        continue;
      }
      TaskNode task;
      task.kind = plan::TaskKind::Source;
      task.name = fmt::format("source:{}@{}", name, rank);
      task.node = p.node_of(rank);
      task.placement = members[0]->placement;
      task.source.dataset = static_cast<int>(d);
      // Rows by node, then by device within the node's rows (NdSbp's
      // nesting); a split on one level only is that level's shards.
      const bool by_node = sbp.across.kind == Sbp::kSplit && p.num_nodes() > 1;
      const bool by_device = sbp.within.kind == Sbp::kSplit && p.per_node() > 1;
      if (by_node) {
        task.source.shard = rank / p.per_node();
        task.source.num_shards = p.num_nodes();
      }
      if (by_device) {
        (by_node ? task.source.sub_shard : task.source.shard) = rank % p.per_node();
        (by_node ? task.source.num_sub_shards : task.source.num_shards) = p.per_node();
      }
      for (const InputNode* in : members) task.source.fields.push_back(in->input.field);
      task.acts_per_step = static_cast<int>(g_.micro_batches);
      int t = add_task(std::move(task), DeviceType::kIo);
      for (size_t k = 0; k < members.size(); ++k) {
        const InputNode* in = members[k];
        outs[k]->push_back(add_regst(t, in->input.name, g_.find(in->input.name)->meta, in->sbp, p, rank));
      }
    }
  }

  void add_variables() {
    for (const VariableNode& v : g_.variables) {
      const graph::Variable& var = v.variable;
      std::vector<int>& tasks = variable_tasks_.emplace_back();
      const graph::Placement& p = at(v.placement);
      std::vector<int64_t>& out = pieces_[var.name];
      const bool everywhere = v.grad_boxing >= 0 && g_.boxings[static_cast<size_t>(v.grad_boxing)].move();
      const int lanes = variable_lanes(v);
      std::vector<int64_t> lane_regsts;  // lanes > 1: lane 0's model regst, then the others
      for (int rank = 0; rank < p.parallel(); ++rank) {
        const Thread thread = thread_of(p, p.node_of(rank), p.device_of(rank), var.block_of ? Rpc::kGet : Rpc::kNone);
        if (!out_.stores(p.node_of(rank)) && !everywhere) {
          const uint64_t id = out_.count_task(p.node_of(rank), thread.type, thread.device);
          out.push_back(count_regst(id, std::nullopt, true));
          if (lanes > 1) lane_regsts.push_back(out.back());
          for (int lane = 1; lane < lanes; ++lane) lane_regsts.push_back(count_regst(id, std::nullopt, true));
          tasks.push_back(-1);
          continue;
        }
        TaskNode task;
        task.kind = plan::TaskKind::Variable;
        task.name = fmt::format("{}@{}", var.name, rank);
        task.node = p.node_of(rank);
        task.device = p.device_of(rank);
        task.placement = v.placement;
        task.variable.init_op = var.init.type;
        task.variable.init_attrs = var.init.attrs;
        if (!task.variable.init_attrs.has("shape"))
          task.variable.init_attrs.set("shape", std::vector<int64_t>(var.shape));
        task.variable.update_op = v.update_op;
        task.variable.update_attrs = v.update_attrs;
        task.variable.num_state = v.num_state;
        task.variable.offset = piece(var.shape, v.sbp, p, rank).origin;
        // The lowest rank that could hold the same piece: node 0 of the
        // placement unless split across nodes, device 0 unless split within.
        const int first = (v.sbp.across.kind == Sbp::kSplit ? rank / p.per_node() : 0) * p.per_node() +
                          (v.sbp.within.kind == Sbp::kSplit ? rank % p.per_node() : 0);
        task.variable.replica = first != rank && piece(var.shape, v.sbp, p, first).origin == task.variable.offset;
        task.variable.block_of = var.block_of;
        task.variable.lanes = lanes;
        task.variable.dc_asgd_lambda = lanes > 1 ? g_.dc_asgd_lambda : 0;
        int t = add_task(std::move(task), thread);
        tasks.push_back(t);
        out.push_back(add_regst(t, var.name, g_.find(var.name)->meta, v.sbp, p, rank, true));
        if (lanes > 1) lane_regsts.push_back(out.back());
        for (int lane = 1; lane < lanes; ++lane)
          lane_regsts.push_back(add_regst(t, var.name, g_.find(var.name)->meta, v.sbp, p, rank, true));
      }
      if (lanes > 1) model_lanes_[var.name] = std::move(lane_regsts);
    }
  }

  void add_computes() {
    for (const OpNode& op : g_.ops) {
      std::vector<int>& tasks = op_tasks_.emplace_back();
      const graph::Placement& p = at(op.placement);
      std::vector<std::vector<int64_t>*> outs;
      std::vector<const TensorMeta*> inputs, outputs;
      for (const std::string& out : op.outputs) {
        outs.push_back(&pieces_[out]);
        outs.back()->reserve(static_cast<size_t>(p.parallel()));
        outputs.push_back(&g_.find(out)->meta);
      }
      // What the op reads: a collective's input as its boxing makes it.
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        const int b = op.input_boxing.empty() ? -1 : op.input_boxing[k];
        inputs.push_back(b >= 0 ? &boxed_meta(g_, g_.boxings[static_cast<size_t>(b)]) : &g_.find(op.inputs[k])->meta);
      }
      const bool everywhere = reads_move(op);  // then it may read across nodes
      int acts = accumulates(op) ? static_cast<int>(g_.micro_batches) : 1;  // once per micro-batch?
      for (const std::string& in : op.inputs) acts = std::max(acts, rate(in));
      for (int rank = 0; rank < p.parallel(); ++rank) {
        const Thread thread =
            thread_of(p, p.node_of(rank), p.device_of(rank), op.backward ? Rpc::kSend : Rpc::kPrefetch);
        if (!out_.stores(p.node_of(rank)) && !everywhere) {
          const uint64_t id = out_.count_task(p.node_of(rank), thread.type, thread.device);
          for (size_t k = 0; k < outs.size(); ++k) outs[k]->push_back(count_regst(id, op.output_sbp[k]));
          tasks.push_back(-1);
          continue;
        }
        TaskNode task;
        task.kind = plan::TaskKind::Compute;
        task.name = fmt::format("{}@{}", op.name, rank);
        task.op_type = op.type;
        task.attrs = op.attrs;
        task.node = p.node_of(rank);
        task.device = p.device_of(rank);
        task.placement = op.placement;
        std::vector<TensorMeta> physical_inputs;
        for (size_t k = 0; k < inputs.size(); ++k) {
          const Shape extent = piece(inputs[k]->shape, op.input_sbp[k], p, rank).extent;
          // Mirrored: a rank's pieces are its whole tensors (a mean is over its rows).
          task.logical_input_shapes.push_back(g_.mirrored ? extent : inputs[k]->shape);
          physical_inputs.push_back({extent, inputs[k]->dtype});
        }
        if (op.def->scratch_bytes != nullptr)
          task.scratch_bytes = static_cast<int64_t>(op.def->scratch_bytes(op.attrs, physical_inputs));
        task.acts_per_step = acts;
        int t = add_task(std::move(task), thread);
        tasks.push_back(t);
        for (size_t k = 0; k < outs.size(); ++k)
          outs[k]->push_back(add_regst(t, op.outputs[k], *outputs[k], op.output_sbp[k], p, rank));
      }
    }
  }

  // Whether boxing `b` may join a bucket: a P -> B across nodes of an f32
  // tensor under bucket_bytes_ whose result no other boxing reads.
  bool bucketable(size_t b, const std::vector<bool>& read_by_boxing) const {
    const BoxingNode& box = g_.boxings[b];
    const LogicalTensor* t = g_.find(box.tensor);
    return !box.move() && !box.as && at(box.placement).num_nodes() > 1 && box.in == NdSbp(Sbp::partial_sum()) &&
           box.out == NdSbp(Sbp::broadcast()) && t->meta.dtype == DType::kF32 && t->meta.bytes() < bucket_bytes_ &&
           !read_by_boxing[b];
  }

  // A conversion within each node to split or P pieces on CPU devices: one
  // task per device, on its thread, making that device's piece (the sums of
  // a P -> S are shared by the node's device threads).
  bool per_device(const BoxingNode& box) const {
    const graph::Placement& p = at(box.placement);
    return !box.move() && p.per_node() > 1 && p.type == DeviceType::kCpu &&
           boxing_form(box.in, box.out, p.num_nodes()) == BoxingForm::kWithinNode &&
           box.out.within.kind != Sbp::kBroadcast;
  }

  // A boxing task of `box` over the pieces on node `index` of its placement.
  TaskNode boxing_task(const BoxingNode& box, std::string name, int index) const {
    const graph::Placement& p = at(box.placement);
    TaskNode task;
    task.kind = plan::TaskKind::Boxing;
    task.name = std::move(name);
    task.node = p.nodes[static_cast<size_t>(index)];
    task.placement = box.placement;
    task.boxing.in = box.in;
    task.boxing.out = box.out;
    task.boxing.parallel = p.parallel();
    task.boxing.num_nodes = p.num_nodes();
    task.boxing.local_pieces = p.per_node();
    task.boxing.first_rank = index * p.per_node();
    task.boxing.reduce_op = box.reduce_op;
    task.acts_per_step = rate(box.tensor);
    return task;
  }

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
  std::vector<int> boxing_inputs(const std::vector<int>& unit, int first, int count) {
    std::vector<int> inputs;
    for (int b : unit) {
      const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
      // A collective's first boxing reads the producer's pieces, in the tensor's own layout.
      const LogicalTensor* t = g_.find(box.tensor);
      const bool own = box.from < 0 && box.as;
      for (int d = 0; d < count; ++d) {
        const int regst = handle(boxing_input(box, first + d), box.tensor, own ? t->sbp : box.in, box.placement,
                                 first + d, own ? &t->meta : &boxed_meta(g_, box));
        if (d == 0 || regst != inputs.back()) inputs.push_back(regst);
      }
    }
    return inputs;
  }

  void add_per_device_boxing(int b) {
    const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
    const graph::Placement& p = at(box.placement);
    const TensorMeta& meta = boxed_meta(g_, box);
    const bool everywhere = reads_move(b);
    for (int rank = 0; rank < p.parallel(); ++rank) {
      if (!out_.stores(p.node_of(rank)) && !everywhere) {
        boxed_[static_cast<size_t>(b)].push_back(
            count_regst(out_.count_task(p.node_of(rank), DeviceType::kCpu, p.device_of(rank))));
        continue;
      }
      const int first = rank / p.per_node() * p.per_node();
      TaskNode task = boxing_task(box, fmt::format("{}@{}", boxing_name(box), rank), rank / p.per_node());
      task.device = p.device_of(rank);
      task.boxing.piece = rank % p.per_node();
      task.inputs = boxing_inputs({b}, first, p.per_node());
      const int t = add_task(std::move(task), DeviceType::kCpu);
      boxed_[static_cast<size_t>(b)].push_back(add_regst(t, box.tensor, meta, box.out, p, rank));
    }
  }

  // A task copying the parts of `sources` (regsts with their logical
  // regions) that fall in `target` into one regst holding `target`, on
  // `device` of `node` (on CPU its thread; on GPUs the node's move thread,
  // which never waits for a collective). Returns the regst.
  int add_copy_task(const BoxingNode& box, std::string name, int placement, int node, int device,
                    const std::vector<std::pair<int, Region>>& sources, const Region& target, const NdSbp& sbp,
                    Rpc rpc = Rpc::kNone) {
    const TensorMeta& meta = boxed_meta(g_, box);
    TaskNode task;
    task.kind = plan::TaskKind::Boxing;
    task.name = std::move(name);
    task.node = node;
    task.placement = placement;
    task.boxing.in = box.in;
    task.boxing.out = box.out;
    for (const auto& [regst, region] : sources) {
      task.inputs.push_back(regst);
      task.boxing.origins.insert(task.boxing.origins.end(), region.origin.begin(), region.origin.end());
    }
    task.boxing.origins.insert(task.boxing.origins.end(), target.origin.begin(), target.origin.end());
    task.acts_per_step = rate(box.tensor);
    const bool cpu = at(placement).type == DeviceType::kCpu;
    if (cpu) task.device = device;
    const int t = cpu ? add_task(std::move(task), thread_of(at(placement), node, device, rpc))
                      : add_task(std::move(task), DeviceType::kComm, kCommThreads);
    return add_region_regst(t, box.tensor, meta, sbp, target);
  }

  // A move: each piece on the target placement is made from the source
  // pieces it overlaps (one replica of each distinct piece, the nearest:
  // same device, then same node, then spread by target node, so a node
  // receives each part once). A source piece that is exactly the target
  // piece is read as it is (no task); one that only overlaps it and lives
  // on another node is sliced there first, so only the overlap crosses; the
  // parts are assembled on the target device, unless the one part is the
  // whole piece. Partial sums (pserver mode) are not replicas: each target
  // piece adds up its overlap with every source piece.
  void add_move(int b) {
    const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
    const graph::Placement& from = at(box.placement);
    const graph::Placement& to = at(box.to);
    const Shape& shape = g_.find(box.tensor)->meta.shape;
    std::vector<Region> held(static_cast<size_t>(from.parallel()));
    for (int i = 0; i < from.parallel(); ++i) held[static_cast<size_t>(i)] = piece(shape, box.in, from, i);
    const std::string name = fmt::format("move:{}:{}->{}", box.tensor, box.in.to_string(), box.out.to_string());
    std::map<std::tuple<int, Shape, Shape>, int> slices;  // (source rank, overlap) -> its regst
    const bool partial = box.in.has(Sbp::kPartialSum);
    // On a pserver: the trainers' gradients come in (sends), a lookup's ids
    // come in and its rows go out (prefetches).
    const LogicalTensor* moved = g_.find(box.tensor);
    const bool gradient = partial || (moved->origin == TensorOrigin::kOp &&
                                      g_.ops[static_cast<size_t>(moved->producer)].backward);
    const Rpc rpc = gradient ? Rpc::kSend : Rpc::kPrefetch;
    // An async pserver's block: each trainer rank reads its own lane's model;
    // the variable reads each rank's gradient itself (no sum).
    if (auto lanes = model_lanes_.find(box.tensor);
        lanes != model_lanes_.end() && from.parallel() == 1 && static_cast<int>(lanes->second.size()) == to.parallel()) {
      for (int j = 0; j < to.parallel(); ++j)
        boxed_[static_cast<size_t>(b)].push_back(
            handle(lanes->second[static_cast<size_t>(j)], box.tensor, box.in, box.placement, 0));
      return;
    }
    if (partial && to.parallel() == 1 && lane_gradient(box.tensor)) {
      std::vector<int>& inputs = lane_inputs_[b];
      for (int i = 0; i < from.parallel(); ++i)
        inputs.push_back(handle(boxing_input(box, i), box.tensor, box.in, box.placement, i));
      boxed_[static_cast<size_t>(b)].push_back(inputs[0]);
      return;
    }
    for (int j = 0; j < to.parallel(); ++j) {
      const Region target = piece(shape, box.out, to, j);
      const int node = to.node_of(j), device = to.device_of(j);
      // Distinct source regions overlapping the target -> the nearest replica
      // (partial sums: every rank's).
      std::map<std::tuple<std::vector<int64_t>, std::vector<int64_t>, int>, std::pair<int, int>>
          nearest;  // -> (score, rank)
      for (int i = 0; i < from.parallel(); ++i) {
        const Region& r = held[static_cast<size_t>(i)];
        if (intersect(r, target).size() == 0 && !(target.size() == 0 && i == 0)) continue;
        const int score = (from.node_of(i) == node ? 0 : 2 * from.parallel()) +
                          (from.node_of(i) == node && from.device_of(i) == device ? 0 : from.parallel()) +
                          (i - node % from.parallel() + from.parallel()) % from.parallel();
        auto [it, fresh] = nearest.try_emplace({r.origin, r.extent, partial ? i : -1}, score, i);
        if (!fresh && score < it->second.first) it->second = {score, i};
      }
      std::vector<std::pair<int, Region>> parts;
      for (const auto& [region, pick] : nearest) {
        const int i = pick.second;
        const Region& r = held[static_cast<size_t>(i)];
        const Region overlap = intersect(r, target);
        const int input = handle(boxing_input(box, i), box.tensor, box.in, box.placement, i);
        if (r == target || from.node_of(i) == node || overlap == r) {
          parts.push_back({input, r});
          continue;
        }
        // Target pieces alike (B on a node's devices) share one slice.
        auto [it, fresh] = slices.try_emplace({i, overlap.origin, overlap.extent}, -1);
        if (fresh)
          it->second = add_copy_task(box, fmt::format("{}@slice{}to{}", name, i, j), box.placement, from.node_of(i),
                                     from.device_of(i), {{input, r}}, overlap, box.out, rpc);
        parts.push_back({it->second, overlap});
      }
      if (parts.size() == 1 && parts[0].second == target) {
        boxed_[static_cast<size_t>(b)].push_back(parts[0].first);
        continue;
      }
      boxed_[static_cast<size_t>(b)].push_back(
          add_copy_task(box, fmt::format("{}@{}", name, j), box.to, node, device, parts, target, box.out, rpc));
    }
  }

  // One boxing on one node: a task over every piece on node 0's comm thread.
  // Across nodes: one task per node over that node's pieces, on one of
  // kCommThreads comm threads, the same on every node (see order_comm_threads).
  // Small gradients' all-reduces are fused: consecutive bucketable boxings
  // (in that order) share one task and one all-reduce, up to bucket_bytes_.
  // Moves between placements are copy tasks outside that order.
  Status add_boxings() {
    std::vector<bool> read_by_boxing(g_.boxings.size(), false);
    for (const BoxingNode& box : g_.boxings)
      if (box.from >= 0) read_by_boxing[static_cast<size_t>(box.from)] = true;
    // Units of work in order: one boxing, or a bucket of several on one placement.
    const std::vector<std::vector<int>> units = boxing_units(
        g_, bucket_bytes_, [&](size_t b) { return bucketable(b, read_by_boxing); },
        [&](const std::string& tensor) { return rate(tensor); });
    boxed_.assign(g_.boxings.size(), {});
    uint32_t comm_position = 0;  // comm-thread units so far
    for (const std::vector<int>& unit : units) {
      const BoxingNode& box = g_.boxings[static_cast<size_t>(unit[0])];
      if (box.move()) {
        add_move(unit[0]);
        continue;
      }
      if (per_device(box)) {
        add_per_device_boxing(unit[0]);
        continue;
      }
      const graph::Placement& p = at(box.placement);
      const int nodes = p.num_nodes();
      const size_t position = comm_position++;
      const std::string name =
          unit.size() > 1 ? fmt::format("bucket:{}+{}:P->B", box.tensor, unit.size() - 1) : boxing_name(box);
      const uint32_t thread = nodes > 1 ? static_cast<uint32_t>(position % kCommThreads) : 0;
      const bool everywhere = std::any_of(unit.begin(), unit.end(), [&](int b) { return reads_move(b); });
      std::vector<uint64_t> ids;
      std::vector<int> tasks;
      std::vector<std::pair<int, int>> members;  // (node, task handle or -1)
      for (int index = 0; index < nodes; ++index) {
        const int node = p.nodes[static_cast<size_t>(index)];
        const int first = index * p.per_node();
        if (!out_.stores(node) && !everywhere) {
          const uint64_t id = out_.count_task(node, DeviceType::kComm, thread);
          ids.push_back(id);
          members.push_back({node, -1});
          for (int b : unit) {
            const BoxingNode& member = g_.boxings[static_cast<size_t>(b)];
            const int64_t shared = member.out.within.kind == Sbp::kBroadcast ? count_regst(id) : 0;
            for (int d = 0; d < p.per_node(); ++d)
              boxed_[static_cast<size_t>(b)].push_back(shared < 0 ? shared : count_regst(id));
          }
          continue;
        }
        TaskNode task = boxing_task(box, nodes > 1 ? fmt::format("{}@node{}", name, node) : name, index);
        task.boxing.collective_tag = nodes > 1 ? static_cast<int64_t>(unit[0]) + 1 : 0;
        task.boxing.tensors = static_cast<int>(unit.size());
        task.inputs = boxing_inputs(unit, first, p.per_node());
        const int t = add_task(std::move(task), DeviceType::kComm, thread);
        ids.push_back(out_.tasks[t].id);
        tasks.push_back(t);
        members.push_back({node, t});
        for (int b : unit) {
          const BoxingNode& member = g_.boxings[static_cast<size_t>(b)];
          const TensorMeta& meta = boxed_meta(g_, member);
          // A B result is one regst that every device of the node reads.
          const int shared =
              member.out.within.kind == Sbp::kBroadcast ? add_regst(t, member.tensor, meta, member.out, p, first) : -1;
          for (int d = 0; d < p.per_node(); ++d)
            boxed_[static_cast<size_t>(b)].push_back(
                shared >= 0 ? shared : add_regst(t, member.tensor, meta, member.out, p, first + d));
        }
      }
      if (boxing_exchanges(box.in, box.out, nodes))
        for (int t : tasks) out_.tasks[t].boxing.peers = ids;
      if (nodes > 1) chain_units_.push_back({thread, members});
    }
    order_comm_threads();
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
    // (node, thread) -> its tasks in order (handles; -1: another node's, only counted)
    std::map<std::pair<int, uint32_t>, std::vector<int>> chains;
    for (const ChainUnit& unit : chain_units_)
      for (const auto& [node, task] : unit.members) chains[{node, unit.thread}].push_back(task);
    for (auto& [where, chain] : chains) {
      if (chain.size() < 2) continue;
      if (!out_.stores(where.first)) {
        out_.next_regst += static_cast<int64_t>(chain.size() - 1);
        continue;
      }
      int first = -1;
      for (size_t i = 0; i + 1 < chain.size(); ++i) {
        RegstNode r;
        r.name = "ctrl:" + out_.tasks[chain[i]].name;
        r.meta = TensorMeta{Shape{}, DType::kF32};
        r.sbp = NdSbp(Sbp::broadcast());
        r.ctrl = true;
        // Once per micro-batch only if its writer and every reader act so.
        auto acts = [&](int t) { return out_.tasks[static_cast<size_t>(t)].acts_per_step; };
        r.readies_per_step = std::min(acts(chain[i]), acts(chain[i + 1]));
        if (i == 0 && chain.size() > 2) r.readies_per_step = std::min(r.readies_per_step, acts(chain.back()));
        const int id = out_.add_regst(std::move(r), chain[i]);
        if (i == 0) first = id;
        out_.tasks[chain[i + 1]].inputs.push_back(id);  // after the pieces
      }
      if (chain.size() > 2) out_.tasks[chain.back()].inputs.push_back(first);
    }
  }

  void add_sink() {
    TaskNode task;
    task.kind = plan::TaskKind::Sink;
    task.name = "sink";
    task.node = 0;
    task.placement = -1;
    for (const Reported& r : g_.reported) task.acts_per_step = std::max(task.acts_per_step, rate(r.tensor));
    for (const Reported& f : g_.fetched) task.acts_per_step = std::max(task.acts_per_step, rate(f.tensor));
    sink_task_ = add_task(std::move(task), DeviceType::kIo);
  }

  // The regst a consumer on `rank` (of its placement) reads for `tensor`,
  // after boxing `boxing`.
  int read(const std::string& tensor, int boxing, int rank) {
    if (boxing >= 0) {
      const BoxingNode& box = g_.boxings[static_cast<size_t>(boxing)];
      return handle(boxed_[static_cast<size_t>(boxing)][static_cast<size_t>(rank)], tensor, box.out, box.to, rank,
                    &boxed_meta(g_, box));
    }
    const LogicalTensor* t = g_.find(tensor);
    return handle(pieces_.at(tensor)[static_cast<size_t>(rank)], tensor, t->sbp, t->placement, rank);
  }

  Status wire() {
    for (size_t v = 0; v < g_.variables.size(); ++v) {
      const VariableNode& var = g_.variables[v];
      if (var.grad.empty()) continue;
      for (int rank = 0; rank < at(var.placement).parallel(); ++rank) {
        const int t = variable_tasks_[v][static_cast<size_t>(rank)];
        if (t < 0) continue;
        if (auto lanes = lane_inputs_.find(var.grad_boxing); lanes != lane_inputs_.end()) {
          for (int input : lanes->second) out_.tasks[t].inputs.push_back(input);  // one per lane
          continue;
        }
        out_.tasks[t].inputs.push_back(read(var.grad, var.grad_boxing, rank));
      }
    }
    for (size_t o = 0; o < g_.ops.size(); ++o) {
      const OpNode& op = g_.ops[o];
      for (int rank = 0; rank < at(op.placement).parallel(); ++rank)
        if (const int t = op_tasks_[o][static_cast<size_t>(rank)]; t >= 0)
          for (size_t k = 0; k < op.inputs.size(); ++k)
            out_.tasks[t].inputs.push_back(read(op.inputs[k], op.input_boxing[k], rank));
    }
    TaskNode& sink = out_.tasks[sink_task_];
    if (g_.mirrored) sink.sink.ranks = at(0).parallel();
    for (const Reported& r : g_.reported) {
      for (int rank = 0; rank < at(g_.find(r.tensor)->placement).parallel(); ++rank) {
        int regst = read(r.tensor, r.boxing, rank);
        if (rank > 0 && regst == read(r.tensor, r.boxing, rank - 1)) continue;  // a node's shared B result
        sink.inputs.push_back(regst);
        sink.sink.names.push_back(r.name);
        sink.sink.partial.push_back(out_.regsts[regst].sbp == NdSbp(Sbp::partial_sum()));
      }
    }
    for (const Reported& f : g_.fetched) {
      if (g_.mirrored) {  // every rank's own piece
        for (int rank = 0; rank < at(g_.find(f.tensor)->placement).parallel(); ++rank) {
          sink.inputs.push_back(read(f.tensor, f.boxing, rank));
          sink.sink.fetch.push_back(fmt::format("{}@{}", f.tensor, rank));
        }
        continue;
      }
      sink.inputs.push_back(read(f.tensor, f.boxing, 0));  // rank 0's piece, B (whole)
      sink.sink.fetch.push_back(f.tensor);
    }
    return {};
  }

  const LogicalGraph& g_;
  const size_t bucket_bytes_;
  TaskGraph out_;
  // References (handle() says what they are) by rank.
  std::map<std::string, std::vector<int64_t>> pieces_;  // tensor -> its pieces
  std::vector<std::vector<int64_t>> boxed_;             // boxing node -> its output pieces
  std::vector<Counted> counted_;
  std::map<int64_t, int> stored_;  // counted reference -> its handle, once stored
  std::vector<std::vector<int>> variable_tasks_;
  // An async pserver's block: its model regst per lane (trainer rank).
  std::map<std::string, std::vector<int64_t>> model_lanes_;
  // A move of an async block's gradient: no task; the pieces of each lane.
  std::map<int, std::vector<int>> lane_inputs_;
  std::set<int> pserver_nodes_;                    // nodes holding variable blocks
  std::map<std::pair<int, Rpc>, int> rpc_dealt_;  // (pserver node, service) -> tasks dealt to its threads
  std::vector<std::vector<int>> op_tasks_;
  struct ChainUnit {  // a boxing unit across nodes, in order
    uint32_t thread;
    std::vector<std::pair<int, int>> members;  // (node, task handle or -1)
  };
  std::vector<ChainUnit> chain_units_;
  int sink_task_ = -1;
};

}  // namespace

StatusOr<TaskGraph> expand(const LogicalGraph& graph, size_t bucket_bytes, int node) {
  return Expander(graph, bucket_bytes, node).run();
}

}  // namespace rill::compiler
