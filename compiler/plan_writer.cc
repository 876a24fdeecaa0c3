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

plan::DType to_plan(DType dtype) { return dtype == DType::kF32 ? plan::DType::F32 : plan::DType::I32; }

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

Offset<plan::Task> write_task(FlatBufferBuilder& b, const TaskGraph& g, const TaskNode& t) {
  Offset<plan::SourceConf> source = 0;
  Offset<plan::VariableConf> variable = 0;
  Offset<plan::SinkConf> sink = 0;
  Offset<plan::BoxingConf> boxing = 0;
  switch (t.kind) {
    case plan::TaskKind::Source:
      source = plan::CreateSourceConf(b, t.source.dataset, write_strings(b, t.source.fields), t.source.shard,
                                      t.source.num_shards, t.source.sub_shard, t.source.num_sub_shards,
                                      g.global_batch, g.shuffle, g.seed, g.rows_by_rank,
                                      b.CreateVector(t.source.index_bounds), write_strings(b, t.source.index_readers));
      break;
    case plan::TaskKind::Variable: {
      Offset<flatbuffers::String> whole = 0;
      Offset<flatbuffers::Vector<int64_t>> whole_shape = 0, whole_offset = 0;
      if (const auto& block = t.variable.block_of) {
        whole = b.CreateString(block->whole);
        whole_shape = b.CreateVector(std::vector<int64_t>(block->whole_shape));
        std::vector<int64_t> at(block->whole_shape.size(), 0);
        at[0] = block->row_offset;
        whole_offset = b.CreateVector(at);
      }
      variable = plan::CreateVariableConf(b, b.CreateString(t.variable.init_op), write_attrs(b, t.variable.init_attrs),
                                          b.CreateString(t.variable.update_op),
                                          write_attrs(b, t.variable.update_attrs), t.variable.num_state,
                                          b.CreateVector(t.variable.offset), whole, whole_shape, whole_offset,
                                          t.variable.lanes, t.variable.dc_asgd_lambda, t.variable.replica);
      break;
    }
    case plan::TaskKind::Sink: {
      std::vector<uint8_t> partial(t.sink.partial.begin(), t.sink.partial.end());
      sink = plan::CreateSinkConf(b, write_strings(b, t.sink.names), b.CreateVector(partial),
                                  write_strings(b, t.sink.fetch), t.sink.ranks);
      break;
    }
    case plan::TaskKind::Boxing: {
      plan::NdSbp in = to_plan(t.boxing.in), out = to_plan(t.boxing.out);
      const std::vector<uint64_t>& peers = t.boxing.peers;
      boxing = plan::CreateBoxingConf(b, &in, &out, t.boxing.parallel, t.boxing.num_nodes, t.node,
                                      t.boxing.local_pieces, t.boxing.first_rank, t.boxing.collective_tag,
                                      b.CreateVector(peers), t.boxing.tensors, t.boxing.piece,
                                      t.boxing.origins.empty() ? 0 : b.CreateVector(t.boxing.origins),
                                      t.boxing.reduce_op);
      break;
    }
    case plan::TaskKind::Compute:
    case plan::TaskKind::Send:
    case plan::TaskKind::Recv:
    case plan::TaskKind::Copy:
      break;
  }
  std::vector<int64_t> inputs, outputs;
  for (int r : t.inputs) inputs.push_back(g.regsts[static_cast<size_t>(r)].id);
  for (int r : t.outputs) outputs.push_back(g.regsts[static_cast<size_t>(r)].id);
  std::vector<Offset<plan::Shape>> shapes;
  for (const Shape& s : t.logical_input_shapes) shapes.push_back(plan::CreateShape(b, b.CreateVector(s)));
  std::vector<Offset<plan::Shape>> offsets;
  for (const Shape& s : t.input_offsets) offsets.push_back(plan::CreateShape(b, b.CreateVector(s)));
  return plan::CreateTask(b, t.id, t.kind, b.CreateString(t.name), b.CreateString(t.op_type), write_attrs(b, t.attrs),
                          t.node, t.device, ActorId::thread_key(t.id), b.CreateVector(inputs),
                          b.CreateVector(outputs), b.CreateVector(shapes), t.scratch_bytes, source, variable, sink,
                          boxing, t.placement, t.acts_per_step, offsets.empty() ? 0 : b.CreateVector(offsets));
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
  auto root = plan::CreatePlan(b, kPlanVersion, b.CreateString(g.job_name), g.steps, g.global_batch, g.log_every,
                               g.num_nodes, g.devices_per_node, b.CreateVector(datasets), b.CreateVector(tasks),
                               b.CreateVector(regsts), g.node, static_cast<int64_t>(g.next_task),
                               write_strings(b, g.placements), g.micro_batches, b.CreateString(std::string(graph::to_string(g.schedule))),
                               g.stages, g.allow_tf32);
  plan::FinishPlanBuffer(b, root);
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

}  // namespace rill::compiler
