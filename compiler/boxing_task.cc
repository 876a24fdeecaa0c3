#include "compiler/boxing_task.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "kernels/powersgd_layout.h"

namespace rill::compiler {
namespace {

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }
Shape shape(const flatbuffers::Vector<int64_t>* dims) { return dims ? Shape(dims->begin(), dims->end()) : Shape{}; }

// A move between placements: the input pieces' and the output's regions
// (origins from the conf, extents from the regsts) must lie in the logical
// tensor, in one dtype.
StatusOr<BoxingTask> move_task(const plan::Plan& plan, const plan::Task& task, const plan::BoxingConf& conf) {
  const std::string name = str(task.name());
  if (!task.outputs() || task.outputs()->size() != 1)
    return invalid_argument("task '{}': a move makes one piece, not {}", name,
                            task.outputs() ? task.outputs()->size() : 0);
  const plan::RegstDesc* out = find_regst(plan, task.outputs()->Get(0));
  if (out == nullptr) return invalid_argument("task '{}': its output regst is not in the plan", name);
  const TensorMeta logical{shape(out->logical_shape()), read_dtype(out->dtype())};
  const size_t rank = logical.shape.size();
  const size_t inputs = task.inputs()->size();
  if (rank > static_cast<size_t>(kMaxRank))
    return invalid_argument("task '{}': a move of a tensor of rank {}; at most {} axes", name, rank, kMaxRank);
  if (conf.origins()->size() != (inputs + 1) * rank)
    return invalid_argument("task '{}': a move of a rank-{} tensor from {} pieces has {} origin numbers, expected {}",
                            name, rank, inputs, conf.origins()->size(), (inputs + 1) * rank);
  auto region = [&](const plan::RegstDesc* r, size_t k) -> StatusOr<Region> {
    if (r == nullptr) return invalid_argument("task '{}': a regst it reads is not in the plan", name);
    Region out{Shape(conf.origins()->begin() + static_cast<long>(k * rank),
                     conf.origins()->begin() + static_cast<long>((k + 1) * rank)),
               shape(r->shape())};
    if (out.extent.size() != rank || read_dtype(r->dtype()) != logical.dtype ||
        !(shape(r->logical_shape()) == logical.shape))
      return invalid_argument("task '{}': move piece '{}' is not a piece of a {} {} tensor", name, str(r->name()),
                              dtype_name(logical.dtype), shape_string(logical.shape));
    for (size_t a = 0; a < rank; ++a)
      if (out.origin[a] < 0 || out.extent[a] < 0 || out.origin[a] + out.extent[a] > logical.shape[a])
        return invalid_argument("task '{}': move piece at {} of extent {} lies outside the tensor {}", name,
                                shape_string(out.origin), shape_string(out.extent), shape_string(logical.shape));
    return out;
  };
  std::vector<Region> pieces;
  for (size_t k = 0; k < inputs; ++k) {
    RILL_ASSIGN_OR_RETURN(Region r,
                          region(find_regst(plan, task.inputs()->Get(static_cast<flatbuffers::uoffset_t>(k))), k));
    pieces.push_back(std::move(r));
  }
  RILL_ASSIGN_OR_RETURN(Region target, region(out, inputs));
  // Pieces of a partial sum (pserver mode) are added up where they overlap.
  const bool sum = read_sbp(conf.in_sbp()).has(Sbp::kPartialSum);
  if (sum && logical.dtype != DType::kF32)
    return invalid_argument("task '{}': a move adding up partial sums of {}; f32 only", name,
                            dtype_name(logical.dtype));
  return BoxingTask{plan_boxing_move(logical, pieces, target, sum), false, 0};
}

// A device collective: one rank's all-reduce of each input into its output
// (P -> B), reduce-scatter (P -> S(a)), all-gather (S(a) -> B) or
// all-to-all (S(b) -> S(a)) of blocks (split as pieces are), on the one axis of the hierarchy its SBPs change (its
// communicator's ranks are that axis's: every device, a node's devices or a
// lane), among the ranks of a communicator the plan has.
StatusOr<BoxingTask> device_collective_task(const plan::Plan& plan, const plan::Task& task,
                                            const plan::BoxingConf& conf) {
  const std::string name = str(task.name());
  const int group = conf.comm_group();
  const plan::CommGroup* g = plan.comm_groups() != nullptr && static_cast<uint32_t>(group) < plan.comm_groups()->size()
                                 ? plan.comm_groups()->Get(static_cast<uint32_t>(group))
                                 : nullptr;
  if (g == nullptr || g->nodes() == nullptr || g->devices() == nullptr)
    return invalid_argument("task '{}': device collective of communicator {}, which the plan does not have", name,
                            group);
  const int ranks = static_cast<int>(g->nodes()->size());
  const int rank = conf.first_rank();
  const NdSbp in_sbp = read_sbp(conf.in_sbp()), out_sbp = read_sbp(conf.out_sbp());
  // On the axis it changes (its communicator's ranks are that axis's).
  const std::optional<AxisCollective> collective = axis_collective(in_sbp, out_sbp);
  const CollectiveCall call = collective ? collective->call : CollectiveCall::kOther;
  if (call == CollectiveCall::kOther || conf.local_pieces() != 1 || conf.num_nodes() != ranks || conf.parallel() != ranks || rank < 0 ||
      rank >= ranks || g->nodes()->Get(static_cast<uint32_t>(rank)) != task.node() ||
      g->devices()->Get(static_cast<uint32_t>(rank)) != task.device() ||
      ActorId::device_type(task.id()) == DeviceType::kComm)
    return invalid_argument("task '{}': a device collective is one device's all-reduce (P -> B), reduce-scatter "
                            "(P -> S(a)), all-gather (S(a) -> B) or all-to-all (S(b) -> S(a)) on one axis of the "
                            "hierarchy, as its rank of communicator {} ({} ranks), not {} -> {} of rank {} on node {} device {}",
                            name, group, ranks, in_sbp.to_string(), out_sbp.to_string(), rank, task.node(),
                            task.device());
  const int tensors = conf.tensors();
  if (tensors < 1 || (tensors > 1 && call != CollectiveCall::kAllReduce) || !task.outputs() ||
      static_cast<int>(task.inputs()->size()) < tensors ||
      static_cast<int>(task.outputs()->size()) < tensors || static_cast<int>(task.outputs()->size()) > tensors + 1 ||
      conf.reduce_op() > 3 || (tensors > 1 && conf.reduce_op() != 0))
    return invalid_argument("task '{}': a device collective of {} tensors with {} inputs, {} outputs, reduce op {}",
                            name, tensors, task.inputs()->size(), task.outputs() ? task.outputs()->size() : 0,
                            conf.reduce_op());
  BoxingTask work;
  work.exchanges = true;
  work.reduce_op = conf.reduce_op();
  work.comm_group = group;
  work.call = call;
  // Its pieces in its device's memory (cuda), or the host's (cpu).
  const int zone = ActorId::device_type(task.id()) == DeviceType::kCuda ? task.device() : -1;
  const int nodes = static_cast<int>(std::set<int>(g->nodes()->begin(), g->nodes()->end()).size());
  // Blocks of `tensor` along `axis`, one a rank, split as pieces are: by
  // node, then by device, over the communicator's nodes and ranks on each
  // (one level for a node's devices or a lane).
  auto blocks_along = [&](const Shape& tensor, int axis) {
    AxisBlocks b;
    const auto a = static_cast<size_t>(axis);
    b.outer = static_cast<size_t>(num_elements(Shape(tensor.begin(), tensor.begin() + axis)));
    b.slice = static_cast<size_t>(num_elements(Shape(tensor.begin() + axis + 1, tensor.end())));
    for (int r = 0; r < ranks; ++r)
      b.counts.push_back(
          static_cast<size_t>(piece_region({tensor[a]}, NdSbp(Sbp::split(0)), nodes, ranks / nodes, r).extent[0]) *
          b.outer * b.slice);
    return b;
  };
  // `tensor` cut to this rank's block along `axis`.
  auto block_of = [&](Shape tensor, const AxisBlocks& b, int axis) {
    tensor[static_cast<size_t>(axis)] = static_cast<int64_t>(b.counts[static_cast<size_t>(rank)] / (b.outer * b.slice));
    return tensor;
  };
  for (int k = 0; k < tensors; ++k) {
    const plan::RegstDesc* in = find_regst(plan, task.inputs()->Get(static_cast<flatbuffers::uoffset_t>(k)));
    const plan::RegstDesc* out = find_regst(plan, task.outputs()->Get(static_cast<flatbuffers::uoffset_t>(k)));
    if (in == nullptr || out == nullptr)
      return invalid_argument("task '{}': tensor {}'s regsts are not in the plan", name, k);
    // The collective's tensor: the part its communicator works on (on the
    // axis it changes, the whole), which its unsplit side holds; an
    // all-to-all's input holds it whole along the output's axis, its
    // output along the input's.
    Shape part = shape(call == CollectiveCall::kAllGather ? out->shape() : in->shape());
    const bool to_all = call == CollectiveCall::kAllToAll;
    if (call != CollectiveCall::kAllReduce) {
      const Shape other = shape(out->shape());
      const int gathered = to_all ? collective->gathered : collective->split;
      auto fits = [&](int axis) { return axis >= 0 && static_cast<size_t>(axis) < part.size(); };
      if (fits(gathered) && to_all && other.size() == part.size())
        part[static_cast<size_t>(gathered)] = other[static_cast<size_t>(gathered)];
      for (int axis : {collective->split, gathered})
        if (!fits(axis) || other.size() != part.size() || part[static_cast<size_t>(axis)] < ranks)
          return invalid_argument("task '{}': '{}' ({}) split along axis {} over {} ranks", name, str(out->name()),
                                  shape_string(part), axis, ranks);
    }
    if (part.size() > static_cast<size_t>(kMaxRank) || num_elements(part) <= 0)
      return invalid_argument("task '{}': tensor {} of shape {}: a device collective's has at most {} axes and an "
                              "element",
                              name, k, shape_string(part), kMaxRank);
    const TensorMeta meta{part, read_dtype(out->dtype())};
    Shape want_in = part, want_out = part;
    switch (call) {
      case CollectiveCall::kReduceScatter:
        work.blocks = blocks_along(part, collective->split);
        want_out = block_of(part, work.blocks, collective->split);
        break;
      case CollectiveCall::kAllGather:
        work.blocks = blocks_along(part, collective->split);
        want_in = block_of(part, work.blocks, collective->split);
        break;
      case CollectiveCall::kAllToAll:
        // In: this rank's block along the input's axis, cut into the
        // ranks' blocks along the output's; out: its block along the
        // output's, made of every rank's along the input's.
        want_in = block_of(part, blocks_along(part, collective->gathered), collective->gathered);
        work.blocks = blocks_along(want_in, collective->split);
        want_out = block_of(part, blocks_along(part, collective->split), collective->split);
        work.received = blocks_along(want_out, collective->gathered);
        break;
      case CollectiveCall::kAllReduce:
      case CollectiveCall::kReduce:
      case CollectiveCall::kOther:
        break;
    }
    if (!(shape(in->shape()) == want_in) || !(shape(out->shape()) == want_out) ||
        read_dtype(in->dtype()) != meta.dtype || in->device() != zone || out->device() != zone)
      return invalid_argument("task '{}': tensor {} ({} {}) on device {}: its regsts '{}' and '{}' disagree with "
                              "its {} on shape, dtype or memory",
                              name, k, dtype_name(meta.dtype), shape_string(meta.shape), task.device(),
                              str(in->name()), str(out->name()), collective_call_name(call));
    work.tensors.push_back(meta);
  }
  return work;
}

// A conversion each device makes from its own piece (conf.own): its
// regions of the logical tensor, by its rank of the placement's nodes and
// devices per node; B -> P zeroes all but the axis's first rank.
StatusOr<BoxingTask> own_piece_task(const plan::Plan& plan, const plan::Task& task, const plan::BoxingConf& conf) {
  const std::string name = str(task.name());
  const NdSbp in_sbp = read_sbp(conf.in_sbp()), out_sbp = read_sbp(conf.out_sbp());
  const int nodes = conf.num_nodes(), per_node = conf.local_pieces(), rank = conf.first_rank();
  const plan::RegstDesc* in = find_regst(plan, task.inputs()->Get(0));
  const plan::RegstDesc* out = task.outputs() && task.outputs()->size() > 0 ? find_regst(plan, task.outputs()->Get(0))
                                                                             : nullptr;
  if (in == nullptr || out == nullptr || task.outputs()->size() > 2 || nodes < 1 || per_node < 1 ||
      conf.parallel() != nodes * per_node || rank < 0 || rank >= conf.parallel() ||
      ActorId::device_type(task.id()) == DeviceType::kComm || conf.comm_group() >= 0 || conf.tensors() != 1)
    return invalid_argument("task '{}': a conversion of its own piece is one device's, of one tensor, reading and "
                            "writing one piece (rank {} of {} nodes x {})",
                            name, rank, nodes, per_node);
  const TensorMeta logical{shape(out->logical_shape()), read_dtype(out->dtype())};
  const auto rank_of = static_cast<int>(logical.shape.size());
  for (const NdSbp& sbp : {in_sbp, out_sbp})
    for (const Sbp& axis : {sbp.across, sbp.within})
      if (rank_of > kMaxRank || (axis.kind == Sbp::kSplit && (axis.axis < 0 || axis.axis >= rank_of)))
        return invalid_argument("task '{}': {} -> {} of a tensor of shape {} (at most {} axes, splits among them)",
                                name, in_sbp.to_string(), out_sbp.to_string(), shape_string(logical.shape), kMaxRank);
  const std::optional<CollectiveScope> scope = own_piece_scope(in_sbp, out_sbp, logical.shape, nodes, per_node);
  if (!scope)
    return invalid_argument("task '{}': {} -> {} of {} is not made from each device's own piece", name,
                            in_sbp.to_string(), out_sbp.to_string(), shape_string(logical.shape));
  BoxingTask work;
  BoxingTask::OwnPiece& own = work.own.emplace();
  own.input = piece_region(logical.shape, in_sbp, nodes, per_node, rank);
  own.output = piece_region(logical.shape, out_sbp, nodes, per_node, rank);
  own.dtype = logical.dtype;
  // On the axis it changes: from B (a slice, or the value kept by one
  // rank) or from S (its piece); to P (zeros first) or to S.
  const AxisChange change = *axis_change(in_sbp, out_sbp);  // there is one: own_piece_scope found it
  const bool from_b = change.from.kind == Sbp::kBroadcast;
  const bool to_p = change.to.kind == Sbp::kPartialSum;
  own.zero = to_p && (!from_b || !own_piece_holder(*scope, rank, per_node));
  own.copy = !to_p || !from_b || own_piece_holder(*scope, rank, per_node);
  const int zone = ActorId::device_type(task.id()) == DeviceType::kCuda ? task.device() : -1;
  if (!(shape(in->shape()) == own.input.extent) || !(shape(out->shape()) == own.output.extent) ||
      read_dtype(in->dtype()) != logical.dtype || in->device() != zone || out->device() != zone)
    return invalid_argument("task '{}': its regsts '{}' {} and '{}' {} are not rank {}'s pieces {} and {} on device {}",
                            name, str(in->name()), shape_string(shape(in->shape())), str(out->name()),
                            shape_string(shape(out->shape())), rank, shape_string(own.input.extent),
                            shape_string(own.output.extent), task.device());
  return work;
}

}  // namespace

StatusOr<BoxingTask> boxing_task(const plan::Plan& plan, const plan::Task& task) {
  const std::string name = str(task.name());
  const plan::BoxingConf* conf = task.boxing();
  if (!conf || !task.inputs() || task.inputs()->size() == 0)
    return invalid_argument("task '{}': boxing without its conf", name);
  if (conf->origins() != nullptr) return move_task(plan, task, *conf);
  if (conf->comm_group() >= 0) return device_collective_task(plan, task, *conf);
  if (conf->own()) return own_piece_task(plan, task, *conf);
  const NdSbp in_sbp = read_sbp(conf->in_sbp()), out_sbp = read_sbp(conf->out_sbp());
  // Inputs: the node's pieces (one when they are `within` B), then
  // control regsts (ordering only); outputs: the pieces (one for
  // `within` B), then at most one control regst.
  const int local = conf->local_pieces();
  const int tensors = conf->tensors();
  const int inputs = tensors > 1 ? tensors * local : in_sbp.within.kind == Sbp::kBroadcast ? 1 : local;
  const int piece = conf->piece();
  const int outputs = tensors > 1 || piece >= 0 ? std::max(tensors, 1)
                      : out_sbp.within.kind == Sbp::kBroadcast ? 1
                                                               : local;
  if (conf->parallel() < 1 || local < 1 || conf->parallel() % local != 0 || conf->first_rank() % local != 0 ||
      conf->first_rank() + local > conf->parallel() || static_cast<int>(task.inputs()->size()) < inputs ||
      !task.outputs() || static_cast<int>(task.outputs()->size()) < outputs ||
      static_cast<int>(task.outputs()->size()) > outputs + 1 || tensors < 1)
    return invalid_argument("task '{}': boxing of {} pieces, {} of them from rank {}, of {} tensors, with {} "
                            "inputs and {} outputs",
                            name, conf->parallel(), local, conf->first_rank(), tensors, task.inputs()->size(),
                            task.outputs() ? task.outputs()->size() : 0);
  const BoxingForm form = boxing_form(in_sbp, out_sbp, conf->num_nodes());
  if (form == BoxingForm::kChain)
    return invalid_argument("task '{}': no one boxing task turns {} into {} across {} nodes", name,
                            in_sbp.to_string(), out_sbp.to_string(), conf->num_nodes());
  if (piece >= 0 && (piece >= local || tensors != 1 || out_sbp.within.kind == Sbp::kBroadcast ||
                     form != BoxingForm::kWithinNode))
    return invalid_argument("task '{}': boxing piece {} of {}: one task per piece is for conversions within a "
                            "node to split or P pieces, not {} -> {}",
                            name, piece, local, in_sbp.to_string(), out_sbp.to_string());
  // Each tensor's logical shape, from what the task writes (a collective op's
  // boxing reads the pieces of its input as parts of another tensor).
  std::vector<TensorMeta> metas;
  for (int k = 0; k < tensors; ++k) {
    const plan::RegstDesc* written = find_regst(plan, task.outputs()->Get(static_cast<flatbuffers::uoffset_t>(k)));
    if (written == nullptr) return invalid_argument("task '{}': its output regst {} is not in the plan", name, k);
    metas.push_back(TensorMeta{shape(written->logical_shape()), read_dtype(written->dtype())});
    if (metas.back().shape.size() > static_cast<size_t>(kMaxRank))
      return invalid_argument("task '{}': boxing of a tensor of rank {}; at most {} axes", name,
                              metas.back().shape.size(), kMaxRank);
  }
  const bool exchanges = boxing_exchanges(in_sbp, out_sbp, conf->num_nodes());
  if (tensors > 1) {
    if (!(in_sbp == NdSbp(Sbp::partial_sum())) || !(out_sbp == NdSbp(Sbp::broadcast())) || conf->num_nodes() < 2)
      return invalid_argument("task '{}': a bucket of {} tensors boxes P -> B across nodes, not {} -> {} on {}",
                              name, tensors, in_sbp.to_string(), out_sbp.to_string(), conf->num_nodes());
    for (const TensorMeta& m : metas)
      if (m.dtype != DType::kF32)
        return invalid_argument("task '{}': a bucket sums f32 tensors across nodes; one is {}", name,
                                dtype_name(m.dtype));
  }
  if (conf->reduce_op() > 3 || (conf->reduce_op() != 0 && tensors > 1))
    return invalid_argument("task '{}': boxing combines pieces by reduce op {} (0 sum, 1 max, 2 min, 3 product; "
                            "past the sum for one tensor only)",
                            name, conf->reduce_op());
  if (conf->compress() > 2 || conf->compress_start() < 0 ||
      (conf->compress() == 2 && (conf->compress_rank() < 1 || conf->compress_rank() > kMaxCompressionRank)) ||
      (conf->compress() >= 1 &&
       (!(in_sbp == NdSbp(Sbp::partial_sum())) || !(out_sbp == NdSbp(Sbp::broadcast())) || conf->num_nodes() < 2 ||
        conf->reduce_op() != 0 ||
        std::any_of(metas.begin(), metas.end(), [](const TensorMeta& m) { return m.dtype != DType::kF32; }))))
    return invalid_argument("task '{}': compression {} (rank {}) is for f32 sums P -> B across nodes (1: bf16, 2: "
                            "PowerSGD of rank 1 to {}), not {} -> {} of {} on {} node(s)",
                            name, conf->compress(), conf->compress_rank(), kMaxCompressionRank, in_sbp.to_string(),
                            out_sbp.to_string(), dtype_name(metas[0].dtype), conf->num_nodes());
  BoxingTask work =
      tensors > 1
          ? BoxingTask{plan_boxing_bucket(metas, conf->parallel(), conf->first_rank(), local), exchanges, 0}
          : BoxingTask{plan_boxing(in_sbp, out_sbp, conf->parallel(), metas[0], conf->first_rank(), local, piece),
                       exchanges, conf->reduce_op()};
  if (conf->compress() != 0 && work.plan.exchange == BoxingPlan::Exchange::kAllReduce) {
    work.plan.compress = static_cast<BoxingPlan::Compress>(conf->compress());
    work.plan.compress_rank = conf->compress_rank();
    work.plan.compress_start = conf->compress_start();
    work.plan.compress_seed = static_cast<uint64_t>(conf->collective_tag());
    for (const TensorMeta& m : metas) work.plan.tensors.push_back(m.shape);
  }
  return work;
}

}  // namespace rill::compiler
