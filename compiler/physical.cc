#include "compiler/physical.h"

#include "compiler/expander.h"
#include "compiler/optimizer.h"
#include "compiler/ring_expansion.h"

namespace rill::compiler {

int Expander::handle(int64_t ref, const std::string& tensor, const NdSbp& sbp, int placement, int rank,
                     const TensorMeta* as) {
  return num_.resolve(ref, [&] {
    const TensorMeta& logical = as != nullptr ? *as : g_.find(tensor)->meta;
    return region_regst(tensor, logical, sbp, piece(logical.shape, sbp, at(placement), rank));
  });
}

RegstNode Expander::region_regst(const std::string& name, const TensorMeta& logical, const NdSbp& sbp,
                                 const Region& region, bool is_model) const {
  RegstNode r;
  r.name = name;
  r.meta = TensorMeta{region.extent, logical.dtype};
  r.logical_shape = logical.shape;
  r.sbp = sbp;
  r.is_model = is_model;
  r.readies_per_step = rate(name);
  r.stage = g_.find(name)->stage;
  r.after_updates = g_.find(name)->after_updates;
  return r;
}

StatusOr<TaskGraph> Expander::run() {
  out_.job_name = g_.job_name;
  out_.natural_order_because = g_.natural_order_because;
  out_.global_batch = g_.global_batch;
  out_.micro_batches = g_.micro_batches;
  out_.schedule = g_.schedule;
  out_.allow_tf32 = g_.allow_tf32;
  out_.reuse_memory = g_.reuse_memory;
  out_.cuda_graphs = g_.cuda_graphs;
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
  num_.reserve_counted(counted);
  for (const graph::Placement& p : g_.placements) out_.placements.push_back(p.to_string());
  add_sources();
  add_variables();
  add_computes();
  RILL_RETURN_IF_ERROR(add_boxings());
  add_sink();
  RILL_RETURN_IF_ERROR(wire());
  return std::move(out_);
}

Expander::Thread Expander::thread_of(const graph::Placement& p, int node, int device, Rpc rpc) {
  if (rpc == Rpc::kNone || p.type != DeviceType::kCpu || pserver_nodes_.count(node) == 0)
    return {p.type, static_cast<uint32_t>(device)};
  const int sends = g_.rpc_send_threads, gets = g_.rpc_get_threads, prefetches = g_.rpc_prefetch_threads;
  const int first = static_cast<int>(kCommThreads) + 1 + (rpc == Rpc::kSend ? 0 : rpc == Rpc::kGet ? sends : sends + gets);
  const int pool = rpc == Rpc::kSend ? sends : rpc == Rpc::kGet ? gets : prefetches;
  int& dealt = rpc_dealt_[{node, rpc}];
  return {DeviceType::kComm, static_cast<uint32_t>(first + dealt++ % pool)};
}

void Expander::add_sources() {
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

void Expander::add_source_set(int d, size_t set, const std::vector<const InputNode*>& members) {
  const graph::Dataset& dataset = g_.datasets[static_cast<size_t>(d)];
  const std::string name = set == 0 ? dataset.name : fmt::format("{}.{}", dataset.name, set);
  const NdSbp& sbp = members[0]->sbp;
  const graph::Placement& p = at(members[0]->placement);
  std::vector<std::vector<int64_t>*> outs;
  for (const InputNode* in : members) outs.push_back(&pieces_[in->input.name]);
  for (int rank = 0; rank < p.parallel(); ++rank) {
    const Numbering::Task t = add_task(p.node_of(rank), {DeviceType::kIo, 0}, false, [&] {
      TaskNode task;
      SourceInfo& source = task.info.emplace<SourceInfo>();
      task.name = fmt::format("source:{}@{}", name, rank);
      task.placement = members[0]->placement;
      source.dataset = d;
      // Rows by node, then by device within the node's rows (NdSbp's
      // nesting); a split on one level only is that level's shards.
      const bool by_node = sbp.across.kind == Sbp::kSplit && p.num_nodes() > 1;
      const bool by_device = sbp.within.kind == Sbp::kSplit && p.per_node() > 1;
      if (by_node) {
        source.shard = rank / p.per_node();
        source.num_shards = p.num_nodes();
      }
      if (by_device) {
        (by_node ? source.sub_shard : source.shard) = rank % p.per_node();
        (by_node ? source.num_sub_shards : source.num_shards) = p.per_node();
      }
      for (const InputNode* in : members) {
        source.fields.push_back(in->input.field);
        const IndexBound bound = index_bound(in->input.name);
        source.index_bounds.push_back(bound.bound);
        source.index_readers.push_back(bound.reader);
      }
      task.acts_per_step = static_cast<int>(g_.micro_batches);
      return task;
    });
    for (size_t k = 0; k < members.size(); ++k) {
      const InputNode* in = members[k];
      outs[k]->push_back(add_regst(t, in->input.name, g_.find(in->input.name)->meta, in->sbp, p, rank));
    }
  }
}

Expander::IndexBound Expander::index_bound(const std::string& tensor) const {
  IndexBound least;
  for (const OpNode& op : g_.ops) {
    if (op.def->index_bound == nullptr) continue;
    std::vector<TensorMeta> inputs;
    for (const std::string& in : op.inputs) inputs.push_back(g_.find(in)->meta);
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      if (op.inputs[k] != tensor) continue;
      const int64_t bound = op.def->index_bound(op.attrs, inputs, static_cast<int>(k));
      if (bound > 0 && (least.bound == 0 || bound < least.bound))
        least = {bound, fmt::format("{} ({})", op.name, op.type)};
    }
  }
  return least;
}

void Expander::add_variables() {
  for (const VariableNode& v : g_.variables) {
    const graph::Variable& var = v.variable;
    std::vector<int>& tasks = variable_tasks_.emplace_back();
    const graph::Placement& p = at(v.placement);
    std::vector<int64_t>& out = pieces_[var.name];
    // Read across placements (a gradient, or loss scaling's gate, moved in):
    // every node builds the task, so the producer's node knows its readers.
    auto moved = [&](int boxing) { return boxing >= 0 && g_.boxings[static_cast<size_t>(boxing)].move(); };
    const bool everywhere = moved(v.grad_boxing) || moved(v.gate_boxing);
    const int lanes = variable_lanes(v);
    std::vector<int64_t> lane_regsts;  // lanes > 1: lane 0's model regst, then the others
    const std::vector<bool> writes = checkpoint_writers_.writers(v, p);
    for (int rank = 0; rank < p.parallel(); ++rank) {
      const Thread thread = thread_of(p, p.node_of(rank), p.device_of(rank), var.block_of ? Rpc::kGet : Rpc::kNone);
      const Numbering::Task t = add_task(p.node_of(rank), thread, everywhere, [&] {
        TaskNode task;
        VariableInfo& variable = task.info.emplace<VariableInfo>();
        task.name = fmt::format("{}@{}", var.name, rank);
        task.device = p.device_of(rank);
        task.placement = v.placement;
        variable.init_op = var.init.type;
        variable.init_attrs = var.init.attrs;
        if (!variable.init_attrs.has("shape"))
          variable.init_attrs.set("shape", std::vector<int64_t>(var.shape));
        variable.update_op = v.update_op;
        variable.update_attrs = v.update_attrs;
        variable.num_state = v.num_state;
        variable.offset = piece(var.shape, v.sbp, p, rank).origin;
        // The lowest rank that could hold the same piece: node 0 of the
        // placement unless split across nodes, device 0 unless split within.
        const int first = (v.sbp.across.kind == Sbp::kSplit ? rank / p.per_node() : 0) * p.per_node() +
                          (v.sbp.within.kind == Sbp::kSplit ? rank % p.per_node() : 0);
        variable.replica = first != rank && piece(var.shape, v.sbp, p, first).origin == variable.offset;
        variable.checkpoint_writer = writes[static_cast<size_t>(rank)];
        variable.block_of = var.block_of;
        variable.lanes = lanes;
        variable.dc_asgd_lambda = lanes > 1 ? g_.dc_asgd_lambda : 0;
        return task;
      });
      tasks.push_back(t.handle);
      out.push_back(add_regst(t, var.name, g_.find(var.name)->meta, v.sbp, p, rank, true));
      if (lanes > 1) lane_regsts.push_back(out.back());
      for (int lane = 1; lane < lanes; ++lane)
        lane_regsts.push_back(add_regst(t, var.name, g_.find(var.name)->meta, v.sbp, p, rank, true));
    }
    if (lanes > 1) model_lanes_[var.name] = std::move(lane_regsts);
  }
}

void Expander::add_computes() {
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
    // Then it may read across nodes: a move's pieces, a ring's piece of another rank.
    const bool everywhere =
        reads_move(op) || std::any_of(op.ring_steps.begin(), op.ring_steps.end(), [](int s) { return s != 0; });
    int acts = accumulates(op) ? static_cast<int>(g_.micro_batches) : 1;  // once per micro-batch?
    for (const std::string& in : op.inputs) acts = std::max(acts, rate(in));
    for (int rank = 0; rank < p.parallel(); ++rank) {
      const Thread thread =
          thread_of(p, p.node_of(rank), p.device_of(rank), op.backward ? Rpc::kSend : Rpc::kPrefetch);
      const Numbering::Task t = add_task(p.node_of(rank), thread, everywhere, [&] {
        TaskNode task;
        ComputeInfo& compute = task.info.emplace<ComputeInfo>();
        task.name = fmt::format("{}@{}", op.name, rank);
        compute.op_type = op.type;
        compute.attrs = op.attrs;
        task.device = p.device_of(rank);
        task.placement = op.placement;
        std::vector<TensorMeta> physical_inputs;
        for (size_t k = 0; k < inputs.size(); ++k) {
          const Region region = piece(inputs[k]->shape, op.input_sbp[k], p, source_rank(op, k, rank));
          const Shape& extent = region.extent;
          // Mirrored: a rank's pieces are its whole tensors (a mean is over
          // its rows); they lie at the origin, but for the rank's rows of the
          // step (all its micro-batches) stacked after the ranks before it,
          // so that no two ranks' or micro-batches' places meet.
          compute.logical_input_shapes.push_back(g_.mirrored ? extent : inputs[k]->shape);
          Shape offset = region.origin;
          if (g_.mirrored && !offset.empty()) offset[0] = rank * static_cast<int64_t>(g_.micro_batches) * extent[0];
          compute.input_offsets.push_back(std::move(offset));
          physical_inputs.push_back({extent, inputs[k]->dtype});
        }
        if (op.def->scratch_bytes != nullptr && p.type == DeviceType::kCpu)  // CUDA kernels take none
          compute.scratch_bytes = static_cast<int64_t>(op.def->scratch_bytes(op.attrs, physical_inputs));
        task.acts_per_step = acts;
        return task;
      });
      tasks.push_back(t.handle);
      for (size_t k = 0; k < outs.size(); ++k)
        outs[k]->push_back(add_regst(t, op.outputs[k], *outputs[k], op.output_sbp[k], p, rank));
    }
  }
}

int Expander::source_rank(const OpNode& op, size_t k, int rank) const {
  if (k >= op.ring_steps.size() || op.ring_steps[k] == 0) return rank;
  // expand_rings checked that every piece of the ring is of one length, so
  // that some rank holds each.
  return ring_source(g_.find(op.inputs[k])->meta.shape, op.input_sbp[k], at(op.placement), op.ring_axis, rank,
                     op.ring_steps[k]);
}

void Expander::add_sink() {
  sink_task_ = add_task(0, {DeviceType::kIo, 0}, true, [&] {
                 TaskNode task;
                 task.info = SinkInfo{};
                 task.name = "sink";
                 task.placement = -1;
                 for (const Reported& r : g_.reported)
                   task.acts_per_step = std::max(task.acts_per_step, rate(r.tensor));
                 for (const Reported& f : g_.fetched)
                   task.acts_per_step = std::max(task.acts_per_step, rate(f.tensor));
                 return task;
               }).handle;
}

int Expander::read(const std::string& tensor, int boxing, int rank) {
  if (boxing >= 0) {
    const BoxingNode& box = g_.boxings[static_cast<size_t>(boxing)];
    return handle(boxed_[static_cast<size_t>(boxing)][static_cast<size_t>(rank)], tensor, box.out, box.to, rank,
                  &boxed_meta(g_, box));
  }
  const LogicalTensor* t = g_.find(tensor);
  return handle(pieces_.at(tensor)[static_cast<size_t>(rank)], tensor, t->sbp, t->placement, rank);
}

Status Expander::wire() {
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
      if (!var.gate.empty()) out_.tasks[t].inputs.push_back(read(var.gate, var.gate_boxing, rank));
    }
  }
  for (size_t o = 0; o < g_.ops.size(); ++o) {
    const OpNode& op = g_.ops[o];
    for (int rank = 0; rank < at(op.placement).parallel(); ++rank)
      if (const int t = op_tasks_[o][static_cast<size_t>(rank)]; t >= 0)
        for (size_t k = 0; k < op.inputs.size(); ++k)
          out_.tasks[t].inputs.push_back(read(op.inputs[k], op.input_boxing[k], source_rank(op, k, rank)));
  }
  TaskNode& sink_task = out_.tasks[sink_task_];
  SinkInfo& sink = sink_task.sink();
  if (g_.mirrored) sink.ranks = at(0).parallel();
  for (const Reported& r : g_.reported) {
    for (int rank = 0; rank < at(g_.find(r.tensor)->placement).parallel(); ++rank) {
      int regst = read(r.tensor, r.boxing, rank);
      if (rank > 0 && regst == read(r.tensor, r.boxing, rank - 1)) continue;  // a node's shared B result
      sink_task.inputs.push_back(regst);
      sink.names.push_back(r.name);
      sink.partial.push_back(out_.regsts[regst].sbp == NdSbp(Sbp::partial_sum()));
    }
  }
  for (const Reported& f : g_.fetched) {
    if (g_.mirrored) {  // every rank's own piece
      for (int rank = 0; rank < at(g_.find(f.tensor)->placement).parallel(); ++rank) {
        sink_task.inputs.push_back(read(f.tensor, f.boxing, rank));
        sink.fetch.push_back(fmt::format("{}@{}", f.tensor, rank));
      }
      continue;
    }
    sink_task.inputs.push_back(read(f.tensor, f.boxing, 0));  // rank 0's piece, B (whole)
    sink.fetch.push_back(f.tensor);
  }
  return {};
}

StatusOr<TaskGraph> expand(const LogicalGraph& graph, size_t bucket_bytes, int node, GradientCompression compression) {
  return Expander(graph, bucket_bytes, node, compression).run();
}

}  // namespace rill::compiler
