#include "compiler/plan_writer.h"

#include <algorithm>

namespace rill::compiler {
namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;
using flatbuffers::Vector;

plan::Sbp to_plan(const Sbp& sbp) {
  plan::SbpKind kind = sbp.kind == Sbp::kSplit       ? plan::SbpKind::Split
                       : sbp.kind == Sbp::kBroadcast ? plan::SbpKind::Broadcast
                                                     : plan::SbpKind::PartialSum;
  return plan::Sbp(kind, static_cast<int8_t>(sbp.kind == Sbp::kSplit ? sbp.axis : 0));
}

plan::NdSbp to_plan(const NdSbp& sbp) { return plan::NdSbp(to_plan(sbp.across), to_plan(sbp.within)); }

plan::DType to_plan(DType dtype) {
  switch (dtype) {
    case DType::kF32: return plan::DType::F32;
    case DType::kI32: return plan::DType::I32;
    case DType::kBF16: return plan::DType::BF16;
    case DType::kF16: return plan::DType::F16;
  }
  std::abort();  // not a DType
}

Offset<Vector<Offset<plan::Attr>>> write_attrs(FlatBufferBuilder& b, const Attrs& attrs) {
  std::vector<Offset<plan::Attr>> out;
  for (const auto& [name, value] : attrs.values()) {  // std::map: sorted, deterministic
    auto name_offset = b.CreateString(name);
    if (const auto* i = std::get_if<int64_t>(&value)) {
      out.push_back(plan::CreateAttr(b, name_offset, plan::AttrType::Int, *i));
    } else if (const auto* f = std::get_if<double>(&value)) {
      out.push_back(plan::CreateAttr(b, name_offset, plan::AttrType::Float, 0, *f));
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      out.push_back(plan::CreateAttr(b, name_offset, plan::AttrType::String, 0, 0.0, b.CreateString(*s)));
    } else {
      const auto& ints = std::get<std::vector<int64_t>>(value);
      out.push_back(plan::CreateAttr(b, name_offset, plan::AttrType::Ints, 0, 0.0, 0, b.CreateVector(ints)));
    }
  }
  return b.CreateVector(out);
}

Offset<Vector<Offset<flatbuffers::String>>> write_strings(FlatBufferBuilder& b, const std::vector<std::string>& v) {
  std::vector<Offset<flatbuffers::String>> out;
  for (const std::string& s : v) out.push_back(b.CreateString(s));
  return b.CreateVector(out);
}

Offset<plan::Dataset> write_dataset(FlatBufferBuilder& b, const graph::Dataset& d) {
  std::vector<Offset<plan::InlineTensor>> tensors;
  for (const InlineTensor& t : d.tensors)
    tensors.push_back(plan::CreateInlineTensor(b, b.CreateString(t.name), b.CreateVector(t.shape),
                                               b.CreateVector(t.f32), b.CreateVector(t.i32), to_plan(t.dtype)));
  return plan::CreateDataset(b, b.CreateString(d.name), b.CreateString(d.kind), b.CreateString(d.images),
                             b.CreateString(d.labels), b.CreateString(d.path), d.label_column, d.header,
                             d.num_samples, d.num_classes, d.seed, b.CreateVector(d.feature_shape), d.scale,
                             b.CreateVector(tensors), d.id_fields, d.id_range, d.context, d.split_from,
                             d.split_to);
}

// A task's conf tables, by kind: one of them at most is set.
struct TaskConfs {
  Offset<plan::SourceConf> source = 0;
  Offset<plan::VariableConf> variable = 0;
  Offset<plan::SinkConf> sink = 0;
  Offset<plan::BoxingConf> boxing = 0;
};

// One overload per kind of task (no catch-all): a new kind fails to
// compile here until the plan says what it carries.
struct ConfWriter {
  FlatBufferBuilder& b;
  const TaskGraph& g;
  const TaskNode& t;

  TaskConfs operator()(const SourceInfo& s) const {
    return {.source = plan::CreateSourceConf(b, s.dataset, write_strings(b, s.fields), s.shard, s.num_shards,
                                             s.sub_shard, s.num_sub_shards, g.global_batch, g.shuffle, g.seed,
                                             g.rows_by_rank, b.CreateVector(s.index_bounds),
                                             write_strings(b, s.index_readers))};
  }
  TaskConfs operator()(const VariableInfo& v) const {
    Offset<flatbuffers::String> whole = 0;
    Offset<flatbuffers::Vector<int64_t>> whole_shape = 0, whole_offset = 0;
    if (const auto& block = v.block_of) {
      whole = b.CreateString(block->whole);
      whole_shape = b.CreateVector(std::vector<int64_t>(block->whole_shape));
      std::vector<int64_t> at(block->whole_shape.size(), 0);
      at[0] = block->row_offset;
      whole_offset = b.CreateVector(at);
    }
    return {.variable = plan::CreateVariableConf(b, b.CreateString(v.init_op), write_attrs(b, v.init_attrs),
                                                 b.CreateString(v.update_op), write_attrs(b, v.update_attrs),
                                                 v.num_state, b.CreateVector(v.offset), whole, whole_shape,
                                                 whole_offset, v.lanes, v.dc_asgd_lambda, v.replica,
                                                 v.checkpoint_writer)};
  }
  TaskConfs operator()(const SinkInfo& s) const {
    std::vector<uint8_t> partial(s.partial.begin(), s.partial.end());
    return {.sink = plan::CreateSinkConf(b, write_strings(b, s.names), b.CreateVector(partial),
                                         write_strings(b, s.fetch), s.ranks)};
  }
  TaskConfs operator()(const BoxingInfo& x) const {
    plan::NdSbp in = to_plan(x.in), out = to_plan(x.out);
    return {.boxing = plan::CreateBoxingConf(b, &in, &out, x.parallel, x.num_nodes, t.node, x.local_pieces,
                                             x.first_rank, x.collective_tag, b.CreateVector(x.peers), x.tensors,
                                             x.piece, x.origins.empty() ? 0 : b.CreateVector(x.origins),
                                             x.reduce_op, x.comm_group, x.own, x.compress, x.compress_rank,
                                             x.compress_start)};
  }
  TaskConfs operator()(const ComputeInfo&) const { return {}; }  // in the task itself
  TaskConfs operator()(const SendInfo&) const { return {}; }
  TaskConfs operator()(const RecvInfo&) const { return {}; }
  TaskConfs operator()(const CopyInfo&) const { return {}; }
};

Offset<plan::Task> write_task(FlatBufferBuilder& b, const TaskGraph& g, const TaskNode& t) {
  const TaskConfs confs = std::visit(ConfWriter{b, g, t}, t.info);
  static const ComputeInfo kNone;
  const ComputeInfo* compute = std::get_if<ComputeInfo>(&t.info);
  if (compute == nullptr) compute = &kNone;
  std::vector<int64_t> inputs, outputs;
  for (int r : t.inputs) inputs.push_back(g.regsts[static_cast<size_t>(r)].id);
  for (int r : t.outputs) outputs.push_back(g.regsts[static_cast<size_t>(r)].id);
  std::vector<Offset<plan::Shape>> shapes;
  for (const Shape& s : compute->logical_input_shapes) shapes.push_back(plan::CreateShape(b, b.CreateVector(s)));
  std::vector<Offset<plan::Shape>> offsets;
  for (const Shape& s : compute->input_offsets) offsets.push_back(plan::CreateShape(b, b.CreateVector(s)));
  return plan::CreateTask(b, t.id, t.kind(), b.CreateString(t.name), b.CreateString(compute->op_type),
                          write_attrs(b, compute->attrs), t.node, t.device, ActorId::thread_key(t.id),
                          b.CreateVector(inputs), b.CreateVector(outputs), b.CreateVector(shapes),
                          compute->scratch_bytes, confs.source, confs.variable, confs.sink, confs.boxing, t.placement,
                          t.acts_per_step, offsets.empty() ? 0 : b.CreateVector(offsets));
}

Offset<plan::RegstDesc> write_regst(FlatBufferBuilder& b, const TaskGraph& g, const RegstNode& r) {
  // Another node's regst, read here (a mirror): its consumers on this node.
  const bool foreign = g.node >= 0 && r.node != g.node;
  std::vector<uint64_t> consumers;
  for (int c : r.consumers)
    if (!foreign || g.tasks[c].node == g.node) consumers.push_back(g.tasks[c].id);
  plan::NdSbp sbp = to_plan(r.sbp);
  return plan::CreateRegstDesc(b, r.id, b.CreateString(r.name), r.producer_id,
                               b.CreateVector(consumers), r.register_num, to_plan(r.meta.dtype),
                               b.CreateVector(r.meta.shape), b.CreateVector(r.logical_shape), &sbp,
                               static_cast<int64_t>(r.meta.bytes()), r.is_model, r.device, r.readies_per_step);
}

}  // namespace

std::string write_plan(const TaskGraph& g) {
  FlatBufferBuilder b(4096);
  std::vector<Offset<plan::Dataset>> datasets;
  for (const graph::Dataset& d : g.datasets) datasets.push_back(write_dataset(b, d));
  // A node's graph also holds tasks of other nodes (those that read across
  // nodes) and regsts they read: its plan is its own tasks and the regsts
  // they touch. Tasks are stored in id order; regsts need not be.
  std::vector<Offset<plan::Task>> tasks;
  std::vector<int> regst_order;
  std::vector<bool> touched(g.regsts.size(), g.node < 0);
  for (const TaskNode& t : g.tasks) {
    if (g.node >= 0 && t.node != g.node) continue;
    tasks.push_back(write_task(b, g, t));
    for (int r : t.inputs) touched[static_cast<size_t>(r)] = true;
    for (int r : t.outputs) touched[static_cast<size_t>(r)] = true;
  }
  for (size_t i = 0; i < g.regsts.size(); ++i)
    if (touched[i]) regst_order.push_back(static_cast<int>(i));
  std::sort(regst_order.begin(), regst_order.end(),
            [&](int x, int y) { return g.regsts[static_cast<size_t>(x)].id < g.regsts[static_cast<size_t>(y)].id; });
  std::vector<Offset<plan::RegstDesc>> regsts;
  for (int i : regst_order) regsts.push_back(write_regst(b, g, g.regsts[static_cast<size_t>(i)]));
  std::vector<Offset<plan::CommGroup>> groups;
  for (const CommGroup& group : g.comm_groups) {
    std::vector<int32_t> nodes, devices;
    for (const auto& [node, device] : group.ranks) {
      nodes.push_back(node);
      devices.push_back(device);
    }
    std::vector<Offset<plan::CommCall>> calls;
    for (const CommCall& c : group.calls)
      calls.push_back(plan::CreateCommCall(b, b.CreateString(c.name), c.tag, b.CreateString(collective_call_name(c.op)),
                                           c.tensors, c.bytes));
    groups.push_back(
        plan::CreateCommGroup(b, b.CreateVector(nodes), b.CreateVector(devices), b.CreateVector(calls), group.cuda));
  }
  auto root = plan::CreatePlan(b, kPlanVersion, b.CreateString(g.job_name), g.steps, g.global_batch, g.log_every,
                               g.num_nodes, g.devices_per_node, b.CreateVector(datasets), b.CreateVector(tasks),
                               b.CreateVector(regsts), g.node, static_cast<int64_t>(g.next_task),
                               write_strings(b, g.placements), g.micro_batches, b.CreateString(std::string(graph::to_string(g.schedule))),
                               g.stages, g.allow_tf32, g.reuse_memory, g.cuda_graphs,
                               groups.empty() ? 0 : b.CreateVector(groups),
                               g.natural_order_because.empty() ? 0 : b.CreateString(g.natural_order_because));
  plan::FinishPlanBuffer(b, root);
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

}  // namespace rill::compiler
