// Boxing tasks: per device, per node over its pieces, device collectives,
// buckets of small gradients, and the one order of each comm thread's (and
// device thread's) collectives.
#include <tuple>

#include "compiler/boxing_units.h"
#include "compiler/expander.h"

namespace rill::compiler {

bool Expander::bucketable(size_t b, const std::vector<bool>& read_by_boxing) const {
  const BoxingNode& box = g_.boxings[b];
  const LogicalTensor* t = g_.find(box.tensor);
  return !box.move() && !box.as &&
         (at(box.placement).num_nodes() > 1 || device_collective(box).has_value()) &&
         box.in == NdSbp(Sbp::partial_sum()) && box.out == NdSbp(Sbp::broadcast()) && t->meta.dtype == DType::kF32 &&
         t->meta.bytes() < bucket_bytes_ && !read_by_boxing[b];
}

void Expander::mark_gradient_boxings() {
  gradient_boxing_.assign(g_.boxings.size(), false);
  auto mark = [&](int b) {
    for (; b >= 0 && !gradient_boxing_[static_cast<size_t>(b)]; b = g_.boxings[static_cast<size_t>(b)].from)
      gradient_boxing_[static_cast<size_t>(b)] = true;
  };
  for (const VariableNode& v : g_.variables) {
    mark(v.grad_boxing);
    // With clipping or loss scaling the update reads the gradient through
    // the compiler's own norm ops (compiler/gradient_norm.cc: an identity,
    // then a product by the factor), whose input is where it is summed.
    for (const LogicalTensor* t = v.grad.empty() ? nullptr : g_.find(v.grad);
         t != nullptr && t->origin == TensorOrigin::kOp && t->producer >= 0;) {
      const OpNode& op = g_.ops[static_cast<size_t>(t->producer)];
      if (op.name.rfind("grad_norm/", 0) != 0 || op.inputs.empty()) break;
      if (!op.input_boxing.empty()) mark(op.input_boxing[0]);
      t = g_.find(op.inputs[0]);
    }
  }
}

bool Expander::compressed(const std::vector<int>& unit) const {
  if (gradient_boxing_.empty()) return false;
  for (int b : unit) {
    const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
    if (!gradient_boxing_[static_cast<size_t>(b)] || box.move() || box.reduce_op != 0 ||
        at(box.placement).num_nodes() < 2 || !(box.in == NdSbp(Sbp::partial_sum())) ||
        !(box.out == NdSbp(Sbp::broadcast())) || boxed_meta(g_, box).dtype != DType::kF32)
      return false;
  }
  return true;
}

namespace {

// The part of `logical` that rank `rank`'s communicator works on (its
// collective's whole tensor): the axis the collective changes taken whole.
Shape collective_part(const Shape& logical, const NdSbp& in, CollectiveScope scope, const graph::Placement& p,
                      int rank) {
  const NdSbp kept = scope == CollectiveScope::kNode   ? NdSbp(in.across, Sbp::broadcast())
                     : scope == CollectiveScope::kLane ? NdSbp(Sbp::broadcast(), in.within)
                                                       : NdSbp(Sbp::broadcast());
  return piece_region(logical, kept, p.num_nodes(), p.per_node(), rank).extent;
}

// Rank `rank` of the placement: its communicator's key (0 for kAll, its
// node's index for kNode, its device's index for kLane) and its rank there.
std::pair<int, int> collective_place(CollectiveScope scope, const graph::Placement& p, int rank) {
  switch (scope) {
    case CollectiveScope::kAll: return {0, rank};
    case CollectiveScope::kNode: return {rank / p.per_node(), rank % p.per_node()};
    case CollectiveScope::kLane: return {rank % p.per_node(), rank / p.per_node()};
  }
  return {0, rank};
}

int collective_ranks(CollectiveScope scope, const graph::Placement& p) {
  switch (scope) {
    case CollectiveScope::kAll: return p.parallel();
    case CollectiveScope::kNode: return p.per_node();
    case CollectiveScope::kLane: return p.num_nodes();
  }
  return p.parallel();
}

}  // namespace

std::optional<AxisCollective> Expander::device_collective(const BoxingNode& box) const {
  const graph::Placement& p = at(box.placement);
  if (!g_.nccl || box.move() || p.parallel() < 2) return std::nullopt;
  const std::optional<AxisCollective> c = axis_collective(box.in, box.out);
  if (!c || collective_ranks(c->scope, p) < 2) return std::nullopt;
  if (c->call == CollectiveCall::kAllReduce) return c;
  // Blocks along the split axis, rank r's the r-th (split as pieces are):
  // at least one slice each (an all-to-all's along both of its axes).
  const Shape& logical = boxed_meta(g_, box).shape;
  const int ranks = collective_ranks(c->scope, p);
  auto too_few = [&](const Shape& part, int axis) {
    return axis >= static_cast<int>(part.size()) || part[static_cast<size_t>(axis)] < ranks;
  };
  for (int rank = 0; rank < p.parallel(); ++rank) {
    const Shape part = collective_part(logical, box.in, c->scope, p, rank);
    if (too_few(part, c->split) || (c->call == CollectiveCall::kAllToAll && too_few(part, c->gathered)))
      return std::nullopt;
  }
  return c;
}

bool Expander::own_piece(const BoxingNode& box) const {
  const graph::Placement& p = at(box.placement);
  return g_.nccl && !box.move() && !box.as && p.parallel() > 1 &&
         own_piece_scope(box.in, box.out, boxed_meta(g_, box).shape, p.num_nodes(), p.per_node()).has_value();
}

void Expander::add_own_piece_boxing(int b) {
  const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
  const graph::Placement& p = at(box.placement);
  const TensorMeta& meta = boxed_meta(g_, box);
  const bool everywhere = reads_move(b);
  for (int rank = 0; rank < p.parallel(); ++rank) {
    const Numbering::Task t =
        add_task(p.node_of(rank), {p.type, static_cast<uint32_t>(p.device_of(rank))}, everywhere, [&] {
          TaskNode task = boxing_task(box, fmt::format("{}@{}", boxing_name(box), rank), rank / p.per_node());
          task.device = p.device_of(rank);
          task.boxing().first_rank = rank;
          task.boxing().own = true;
          task.inputs = boxing_inputs({b}, rank, 1);
          return task;
        });
    boxed_[static_cast<size_t>(b)].push_back(add_regst(t, box.tensor, meta, box.out, p, rank));
  }
}

int Expander::comm_group(std::vector<std::pair<int, int>> ranks, DeviceType type) {
  for (size_t g = 0; g < out_.comm_groups.size(); ++g)
    if (out_.comm_groups[g].ranks == ranks) return static_cast<int>(g);
  out_.comm_groups.push_back({std::move(ranks), {}, type == DeviceType::kCuda});
  return static_cast<int>(out_.comm_groups.size() - 1);
}

Status Expander::add_device_collective(const std::vector<int>& unit, const std::string& name,
                                       AxisCollective collective) {
  const BoxingNode& box = g_.boxings[static_cast<size_t>(unit[0])];
  const graph::Placement& p = at(box.placement);
  const CollectiveScope scope = collective.scope;
  // Its communicators (one, one per node or one per lane), each with a tag
  // of its own where it crosses nodes.
  const int keys = scope == CollectiveScope::kAll ? 1 : p.parallel() / collective_ranks(scope, p);
  std::vector<std::vector<std::pair<int, int>>> members(static_cast<size_t>(keys));
  for (int rank = 0; rank < p.parallel(); ++rank)
    members[static_cast<size_t>(collective_place(scope, p, rank).first)].emplace_back(p.node_of(rank),
                                                                                      p.device_of(rank));
  std::vector<int> groups;
  std::vector<int64_t> tags;
  for (int key = 0; key < keys; ++key) {
    groups.push_back(comm_group(members[static_cast<size_t>(key)], p.type));
    tags.push_back(scope == CollectiveScope::kLane && key > 0 ? next_tag_++ : static_cast<int64_t>(unit[0]) + 1);
  }
  if (next_tag_ >= (int64_t{1} << 19))  // the last one made 2^19 - 2 at most (plan_verify)
    return invalid_argument("boxing '{}': more than 2^19 collectives in one plan", name);
  const bool everywhere = std::any_of(unit.begin(), unit.end(), [&](int b) { return reads_move(b); });
  std::vector<std::vector<uint64_t>> ids(static_cast<size_t>(keys));
  std::vector<std::vector<int>> tasks(static_cast<size_t>(keys));
  std::vector<ChainMember> chained;
  for (int rank = 0; rank < p.parallel(); ++rank) {
    const auto [key, index] = collective_place(scope, p, rank);
    const size_t k = static_cast<size_t>(key);
    const int node = p.node_of(rank);
    const Thread thread{p.type, static_cast<uint32_t>(p.device_of(rank))};
    const Numbering::Task t = add_task(node, thread, everywhere, [&] {
      TaskNode task = boxing_task(box, fmt::format("{}@{}", name, rank), rank / p.per_node());
      task.device = p.device_of(rank);
      BoxingInfo& b = task.boxing();
      b.parallel = b.num_nodes = collective_ranks(scope, p);  // the collective's ranks
      b.local_pieces = 1;
      b.first_rank = index;
      b.collective_tag = tags[k];
      b.tensors = static_cast<int>(unit.size());
      b.comm_group = groups[k];
      task.inputs = boxing_inputs(unit, rank, 1);
      return task;
    });
    ids[k].push_back(t.id);
    if (t.stored()) tasks[k].push_back(t.handle);
    chained.push_back({node, thread, t});
    for (int b : unit) {
      const BoxingNode& member = g_.boxings[static_cast<size_t>(b)];
      boxed_[static_cast<size_t>(b)].push_back(
          add_regst(t, member.tensor, boxed_meta(g_, member), member.out, p, rank));
    }
  }
  for (int key = 0; key < keys; ++key) {
    const size_t k = static_cast<size_t>(key);
    for (int t : tasks[k]) out_.tasks[static_cast<size_t>(t)].boxing().peers = ids[k];
    // Its first rank's part: every rank of a communicator works on the same.
    int first = 0;
    while (collective_place(scope, p, first).first != key) ++first;
    CommCall made{name, tags[k], collective.call, static_cast<int>(unit.size()), 0};
    for (int b : unit) {
      const BoxingNode& member = g_.boxings[static_cast<size_t>(b)];
      made.bytes += TensorMeta{collective_part(boxed_meta(g_, member).shape, member.in, scope, p, first),
                               boxed_meta(g_, member).dtype}
                        .bytes();
    }
    out_.comm_groups[static_cast<size_t>(groups[k])].calls.push_back(std::move(made));
  }
  chain_units_.push_back(std::move(chained));
  return {};
}

bool Expander::per_device(const BoxingNode& box) const {
  const graph::Placement& p = at(box.placement);
  return !box.move() && p.per_node() > 1 && p.type == DeviceType::kCpu &&
         boxing_form(box.in, box.out, p.num_nodes()) == BoxingForm::kWithinNode &&
         box.out.within.kind != Sbp::kBroadcast;
}

TaskNode Expander::boxing_task(const BoxingNode& box, std::string name, int index) const {
  const graph::Placement& p = at(box.placement);
  TaskNode task;
  BoxingInfo& boxing = task.info.emplace<BoxingInfo>();
  task.name = std::move(name);
  task.node = p.nodes[static_cast<size_t>(index)];
  task.placement = box.placement;
  boxing.in = box.in;
  boxing.out = box.out;
  boxing.parallel = p.parallel();
  boxing.num_nodes = p.num_nodes();
  boxing.local_pieces = p.per_node();
  boxing.first_rank = index * p.per_node();
  boxing.reduce_op = box.reduce_op;
  task.acts_per_step = rate(box.tensor);
  return task;
}

std::vector<int> Expander::boxing_inputs(const std::vector<int>& unit, int first, int count) {
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

void Expander::add_per_device_boxing(int b) {
  const BoxingNode& box = g_.boxings[static_cast<size_t>(b)];
  const graph::Placement& p = at(box.placement);
  const TensorMeta& meta = boxed_meta(g_, box);
  const bool everywhere = reads_move(b);
  for (int rank = 0; rank < p.parallel(); ++rank) {
    const int first = rank / p.per_node() * p.per_node();
    const Numbering::Task t =
        add_task(p.node_of(rank), {DeviceType::kCpu, static_cast<uint32_t>(p.device_of(rank))}, everywhere, [&] {
          TaskNode task = boxing_task(box, fmt::format("{}@{}", boxing_name(box), rank), rank / p.per_node());
          task.device = p.device_of(rank);
          task.boxing().piece = rank % p.per_node();
          task.inputs = boxing_inputs({b}, first, p.per_node());
          return task;
        });
    boxed_[static_cast<size_t>(b)].push_back(add_regst(t, box.tensor, meta, box.out, p, rank));
  }
}

Status Expander::add_boxings() {
  std::vector<bool> read_by_boxing(g_.boxings.size(), false);
  for (const BoxingNode& box : g_.boxings)
    if (box.from >= 0) read_by_boxing[static_cast<size_t>(box.from)] = true;
  // Units of work in order: one boxing, or a bucket of several on one placement.
  const std::vector<std::vector<int>> units = boxing_units(
      g_, bucket_bytes_, [&](size_t b) { return bucketable(b, read_by_boxing); },
      [&](const std::string& tensor) { return rate(tensor); });
  boxed_.assign(g_.boxings.size(), {});
  next_tag_ = static_cast<int64_t>(g_.boxings.size()) + 1;
  uint32_t comm_position = 0;  // comm-thread units so far
  for (const std::vector<int>& unit : units) {
    const BoxingNode& box = g_.boxings[static_cast<size_t>(unit[0])];
    if (box.move()) {
      add_move(unit[0]);
      continue;
    }
    const std::string name =
        unit.size() > 1 ? fmt::format("bucket:{}+{}:P->B", box.tensor, unit.size() - 1) : boxing_name(box);
    if (const std::optional<AxisCollective> collective = device_collective(box)) {
      RILL_RETURN_IF_ERROR(add_device_collective(unit, name, *collective));
      continue;
    }
    if (own_piece(box)) {
      add_own_piece_boxing(unit[0]);
      continue;
    }
    if (per_device(box)) {
      add_per_device_boxing(unit[0]);
      continue;
    }
    const graph::Placement& p = at(box.placement);
    const int nodes = p.num_nodes();
    const size_t position = comm_position++;
    const uint32_t thread = nodes > 1 ? static_cast<uint32_t>(position % kCommThreads) : 0;
    const bool everywhere = std::any_of(unit.begin(), unit.end(), [&](int b) { return reads_move(b); });
    std::vector<uint64_t> ids;
    std::vector<int> tasks;
    std::vector<ChainMember> members;
    for (int index = 0; index < nodes; ++index) {
      const int node = p.nodes[static_cast<size_t>(index)];
      const int first = index * p.per_node();
      const Numbering::Task t = add_task(node, {DeviceType::kComm, thread}, everywhere, [&] {
        TaskNode task = boxing_task(box, nodes > 1 ? fmt::format("{}@node{}", name, node) : name, index);
        task.boxing().collective_tag = nodes > 1 ? static_cast<int64_t>(unit[0]) + 1 : 0;
        task.boxing().tensors = static_cast<int>(unit.size());
        if (compressed(unit)) {
          task.boxing().compress = static_cast<uint8_t>(compression_.kind);  // plan.fbs: 1 bf16, 2 PowerSGD
          task.boxing().compress_rank = compression_.kind == graph::Compression::kPowerSGD ? compression_.rank : 0;
          task.boxing().compress_start = compression_.start_step;
        }
        task.inputs = boxing_inputs(unit, first, p.per_node());
        return task;
      });
      ids.push_back(t.id);
      if (t.stored()) tasks.push_back(t.handle);
      members.push_back({node, {DeviceType::kComm, thread}, t});
      for (int b : unit) {
        const BoxingNode& member = g_.boxings[static_cast<size_t>(b)];
        const TensorMeta& meta = boxed_meta(g_, member);
        // A B result is one regst that every device of the node reads.
        const bool shared = member.out.within.kind == Sbp::kBroadcast;
        const int64_t one = shared ? add_regst(t, member.tensor, meta, member.out, p, first) : 0;
        for (int d = 0; d < p.per_node(); ++d)
          boxed_[static_cast<size_t>(b)].push_back(
              shared ? one : add_regst(t, member.tensor, meta, member.out, p, first + d));
      }
    }
    if (boxing_exchanges(box.in, box.out, nodes))
      for (int t : tasks) out_.tasks[t].boxing().peers = ids;
    if (nodes > 1) chain_units_.push_back(std::move(members));
  }
  order_comm_threads();
  return {};
}

void Expander::order_comm_threads() {
  // (node, thread) -> its tasks in order
  std::map<std::tuple<int, DeviceType, uint32_t>, std::vector<Numbering::Task>> chains;
  for (const std::vector<ChainMember>& unit : chain_units_)
    for (const ChainMember& m : unit) chains[{m.node, m.thread.type, m.thread.device}].push_back(m.task);
  for (auto& [where, chain] : chains) {
    if (chain.size() < 2) continue;
    int first = -1;
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      const int id = num_.ctrl_regst(chain[i], [&] {
        // Once per micro-batch only if its writer and every reader act so.
        auto acts = [&](const Numbering::Task& t) { return out_.tasks[static_cast<size_t>(t.handle)].acts_per_step; };
        RegstNode r;
        r.name = "ctrl:" + out_.tasks[static_cast<size_t>(chain[i].handle)].name;
        r.meta = TensorMeta{Shape{}, DType::kF32};
        r.sbp = NdSbp(Sbp::broadcast());
        r.ctrl = true;
        r.readies_per_step = std::min(acts(chain[i]), acts(chain[i + 1]));
        if (i == 0 && chain.size() > 2) r.readies_per_step = std::min(r.readies_per_step, acts(chain.back()));
        return r;
      });
      if (id < 0) continue;  // another node's chain: only counted
      if (i == 0) first = id;
      out_.tasks[static_cast<size_t>(chain[i + 1].handle)].inputs.push_back(id);  // after the pieces
    }
    if (first >= 0 && chain.size() > 2) out_.tasks[static_cast<size_t>(chain.back().handle)].inputs.push_back(first);
  }
}

}  // namespace rill::compiler
