// verify_plan: the checks a runtime runs before trusting plan bytes.
#include <flatbuffers/flatbuffers.h>

#include <algorithm>

#include "base/devices.h"
#include "compiler/compiler.h"

namespace rill::compiler {
namespace {

std::string task_label(const plan::Task* t) {
  return fmt::format("task {} ('{}')", ActorId::to_string(t->id()), t->name() ? t->name()->str() : "");
}

// Tasks ascending by index, regsts by id: find_task and find_regst rely on it.
Status check_order(const plan::Plan& p, bool whole) {
  const uint32_t num_tasks = p.tasks()->size();
  if (p.num_tasks() < num_tasks || (whole && p.num_tasks() != num_tasks))
    return data_loss("plan: num_tasks is {} for {} tasks in a {} plan", p.num_tasks(), num_tasks,
                     whole ? "whole" : "node");
  for (uint32_t i = 0; i < num_tasks; ++i) {
    const uint32_t index = ActorId::index(p.tasks()->Get(i)->id());
    if (whole && index != i) return data_loss("plan: task at {} has actor id index {}", i, index);
    if (i > 0 && index <= ActorId::index(p.tasks()->Get(i - 1)->id()))
      return data_loss("plan: task at {} (index {}) is not after the one before it: repeated or unsorted ids", i,
                       index);
    if (index >= p.num_tasks()) return data_loss("plan: task at {} has index {} of {}", i, index, p.num_tasks());
  }
  for (uint32_t i = 0; i < p.regsts()->size(); ++i) {
    const int64_t id = p.regsts()->Get(i)->id();
    if (whole && id != i) return data_loss("plan: regst at {} has id {}", i, id);
    if (id < 0 || (i > 0 && id <= p.regsts()->Get(i - 1)->id()))
      return data_loss("plan: regst at {} has id {}: negative, repeated or unsorted", i, id);
  }
  return {};
}

// A communicator's ranks, or -1 when its lists are missing or disagree.
int comm_group_ranks(const plan::CommGroup& g) {
  if (g.nodes() == nullptr || g.devices() == nullptr || g.calls() == nullptr ||
      g.nodes()->size() != g.devices()->size())
    return -1;
  return static_cast<int>(g.nodes()->size());
}

// Each communicator: at least two ranks, each a distinct device of a node
// of the plan, node-major with as many on each of its nodes (a node's ranks
// are contiguous, its first node makes the NCCL id); its calls with
// distinct tags. At most 2^17 of them (their set-up tags, boxing_setup.h).
Status check_comm_groups(const plan::Plan& p) {
  if (p.comm_groups() == nullptr) return {};
  if (p.comm_groups()->size() > (uint32_t{1} << 17))
    return data_loss("plan: {} communicators, more than 2^17", p.comm_groups()->size());
  for (uint32_t i = 0; i < p.comm_groups()->size(); ++i) {
    const plan::CommGroup& g = *p.comm_groups()->Get(i);
    const int ranks = comm_group_ranks(g);
    if (ranks < 2) return data_loss("plan: communicator {} has {} ranks (its lists missing or unequal)", i, ranks);
    std::vector<std::pair<int, int>> seen;
    int per_node = 0, run = 0;  // ranks on the first node, on the current one
    for (int r = 0; r < ranks; ++r) {
      const int node = g.nodes()->Get(static_cast<uint32_t>(r)), device = g.devices()->Get(static_cast<uint32_t>(r));
      if (node < 0 || node >= p.num_nodes() || device < 0 || device >= kMaxDevicesPerNode)
        return data_loss("plan: communicator {}'s rank {} is device {} of node {}, outside the plan's {} nodes", i, r,
                         device, node, p.num_nodes());
      if (r > 0 && node != seen.back().first) {
        if (node < seen.back().first || (per_node > 0 && run != per_node))
          return data_loss("plan: communicator {}'s ranks are not node-major with as many on each node", i);
        if (per_node == 0) per_node = run;
        run = 0;
      }
      ++run;
      seen.emplace_back(node, device);
    }
    if (per_node > 0 && run != per_node)
      return data_loss("plan: communicator {}'s ranks are not node-major with as many on each node", i);
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
      return data_loss("plan: communicator {} names one device twice", i);
    std::vector<int64_t> tags;
    for (const plan::CommCall* c : *g.calls()) tags.push_back(c->tag());
    std::sort(tags.begin(), tags.end());
    if (std::adjacent_find(tags.begin(), tags.end()) != tags.end() || (!tags.empty() && tags[0] < 1))
      return data_loss("plan: communicator {}'s calls have repeated or non-positive tags", i);
  }
  return {};
}

bool conf_ok(const plan::Plan& p, const plan::Task* t) {
  switch (t->kind()) {
    case plan::TaskKind::Source:
      return t->source() != nullptr && t->source()->fields() != nullptr && t->source()->dataset() >= 0 &&
             static_cast<uint32_t>(t->source()->dataset()) < p.datasets()->size();
    case plan::TaskKind::Variable: return t->variable() != nullptr;
    case plan::TaskKind::Sink:
      // Inputs: one per reported name, then one per fetched tensor.
      return t->sink() != nullptr && t->sink()->names() != nullptr && t->sink()->partial() != nullptr &&
             t->sink()->partial()->size() == t->sink()->names()->size() &&
             t->sink()->names()->size() + (t->sink()->fetch() ? t->sink()->fetch()->size() : 0) ==
                 t->inputs()->size();
    case plan::TaskKind::Boxing: {
      const plan::BoxingConf* c = t->boxing();
      if (c == nullptr || c->in_sbp() == nullptr || c->out_sbp() == nullptr) return false;
      // A device collective's ranks are its communicator's (devices), else nodes.
      const int ranks = c->comm_group() < 0 ? p.num_nodes()
                        : p.comm_groups() != nullptr && static_cast<uint32_t>(c->comm_group()) < p.comm_groups()->size()
                            ? comm_group_ranks(*p.comm_groups()->Get(static_cast<uint32_t>(c->comm_group())))
                            : -1;
      if (c->num_nodes() < 1 || c->num_nodes() > ranks || c->node() != t->node()) return false;
      // Collective tags below 2^19 - 1 (sent as tag base + 1 + tag): the
      // rest of a run's 2^20 tags are the device collectives' set-up
      // (runtime/node/boxing_setup.h).
      if (c->collective_tag() < 0 || c->collective_tag() >= (int64_t{1} << 19) - 1) return false;
      // A device collective is one of its communicator's calls.
      if (c->comm_group() >= 0) {
        const auto* calls = p.comm_groups()->Get(static_cast<uint32_t>(c->comm_group()))->calls();
        if (std::none_of(calls->begin(), calls->end(),
                         [&](const plan::CommCall* call) { return call->tag() == c->collective_tag(); }))
          return false;
      }
      // Peers, when any: one per node of the placement, this task at its
      // node's place among them (first_rank / local_pieces).
      const auto* peers = c->peers();
      if (peers == nullptr || peers->size() == 0) return true;
      const int index = c->local_pieces() > 0 ? c->first_rank() / c->local_pieces() : -1;
      return peers->size() == static_cast<uint32_t>(c->num_nodes()) && index >= 0 && index < c->num_nodes() &&
             peers->Get(static_cast<uint32_t>(index)) == t->id();
    }
    case plan::TaskKind::Send:
    case plan::TaskKind::Recv: return t->inputs()->size() == 1 && t->outputs()->size() == 1;
    case plan::TaskKind::Copy:
      return t->inputs()->size() == 1 && t->outputs()->size() == 1 && ActorId::device_type(t->id()) == DeviceType::kCuda;
    case plan::TaskKind::Compute: return true;
  }
  return false;
}

// FlatBuffers 2.0's verifier checks a vector's length field but not that
// 8-byte elements are 8-byte aligned; a crafted plan could make every read
// of them a misaligned load. Every vector of 8-byte elements in the schema
// is checked here (the builder aligns every one that has elements; an empty
// one has nothing to read and may sit anywhere).
template <typename T>
bool aligned(const flatbuffers::Vector<T>* v) {
  return v == nullptr || v->size() == 0 || reinterpret_cast<uintptr_t>(v->Data()) % alignof(T) == 0;
}
bool aligned_attrs(const flatbuffers::Vector<flatbuffers::Offset<plan::Attr>>* attrs) {
  if (attrs != nullptr)
    for (const plan::Attr* a : *attrs)
      if (!aligned(a->ints())) return false;
  return true;
}
// The first vector of 8-byte values that is not 8-byte aligned, or "".
std::string misaligned_vector(const plan::Plan& p) {
  if (p.datasets())
    for (const plan::Dataset* d : *p.datasets()) {
      if (!aligned(d->feature_shape())) return "a dataset's feature_shape";
      if (d->tensors())
        for (const plan::InlineTensor* t : *d->tensors())
          if (!aligned(t->shape())) return "an inline tensor's shape";
    }
  if (p.regsts())
    for (const plan::RegstDesc* r : *p.regsts()) {
      if (!aligned(r->consumers())) return fmt::format("regst {}'s consumers", r->id());
      if (!aligned(r->shape()) || !aligned(r->logical_shape())) return fmt::format("regst {}'s shape", r->id());
    }
  if (p.tasks())
    for (const plan::Task* t : *p.tasks()) {
      if (!aligned(t->inputs()) || !aligned(t->outputs())) return task_label(t) + "'s inputs or outputs";
      if (!aligned_attrs(t->attrs())) return task_label(t) + "'s attrs";
      if (t->logical_input_shapes())
        for (const plan::Shape* shape : *t->logical_input_shapes())
          if (!aligned(shape->dims())) return task_label(t) + "'s logical_input_shapes";
      if (t->input_offsets())
        for (const plan::Shape* offset : *t->input_offsets())
          if (!aligned(offset->dims())) return task_label(t) + "'s input_offsets";
      if (const plan::VariableConf* v = t->variable())
        if (!aligned(v->offset()) || !aligned(v->whole_shape()) || !aligned(v->whole_offset()) ||
            !aligned_attrs(v->init_attrs()) || !aligned_attrs(v->update_attrs()))
          return task_label(t) + "'s variable";
      if (const plan::BoxingConf* b = t->boxing())
        if (!aligned(b->peers()) || !aligned(b->origins())) return task_label(t) + "'s boxing";
    }
  return "";
}

// FlatBuffers' verifier does not check an enum's range: a dtype this build
// does not know is refused here, so nothing branches on it later.
bool known(plan::DType dtype) {
  switch (dtype) {
    case plan::DType::F32:
    case plan::DType::I32:
    case plan::DType::BF16:
    case plan::DType::F16:
      return true;
  }
  return false;
}

Status check_references(const plan::Plan& p) {
  if (p.tasks() == nullptr || p.regsts() == nullptr || p.datasets() == nullptr)
    return data_loss("plan: tasks, regsts or datasets missing");
  const int node = p.node();
  const bool whole = node == -1;
  if (p.num_nodes() < 1 || node < -1 || node >= p.num_nodes())
    return data_loss("plan: node {} of a plan over {} nodes", node, p.num_nodes());
  RILL_RETURN_IF_ERROR(check_order(p, whole));
  RILL_RETURN_IF_ERROR(check_comm_groups(p));
  // Rates: once a step or once a micro-batch; a task reads or writes a regst
  // that is ready as often as it acts, or once a step.
  const int64_t micro = p.micro_batches();
  if (micro < 1 || micro > p.global_batch()) return data_loss("plan: {} micro-batches a step", micro);
  const std::string schedule = p.schedule() ? p.schedule()->str() : "";
  if (schedule != "1f1b" && schedule != "gpipe") return data_loss("plan: schedule '{}' (1f1b or gpipe)", schedule);
  if (p.stages() < 1) return data_loss("plan: {} pipeline stages", p.stages());
  auto rate_ok = [&](int64_t r) { return r == 1 || r == micro; };
  // An actor id a regst names: on this plan's node(s) one of its tasks, elsewhere
  // just a plausible id (its task is in another node's plan).
  auto resolves = [&](uint64_t id) {
    if (ActorId::node(id) >= static_cast<uint32_t>(p.num_nodes())) return false;
    if (whole || ActorId::node(id) == static_cast<uint32_t>(node)) return find_task(p, id) != nullptr;
    return ActorId::index(id) < p.num_tasks();
  };
  for (const plan::Task* t : *p.tasks()) {
    if (t->thread() != ActorId::thread_key(t->id())) return data_loss("plan: {} has a wrong thread key", task_label(t));
    if (t->node() < 0 || static_cast<uint32_t>(t->node()) != ActorId::node(t->id()) || t->node() >= p.num_nodes() ||
        (!whole && t->node() != node))
      return data_loss("plan: {} is on node {} in a plan of {} nodes for node {}", task_label(t), t->node(),
                       p.num_nodes(), node);
    if (t->inputs() == nullptr || t->outputs() == nullptr)
      return data_loss("plan: {} lacks inputs or outputs", task_label(t));
    if (!rate_ok(t->acts_per_step()))
      return data_loss("plan: {} acts {} times a step with {} micro-batches", task_label(t), t->acts_per_step(), micro);
    for (int64_t r : *t->inputs())
      if (find_regst(p, r) == nullptr)
        return data_loss("plan: {} reads regst {}, which is not in the plan", task_label(t), r);
    for (const auto* io : {t->inputs(), t->outputs()})
      for (int64_t r : *io)
        if (const plan::RegstDesc* regst = find_regst(p, r);
            regst != nullptr && (!rate_ok(regst->readies_per_step()) || regst->readies_per_step() > t->acts_per_step()))
          return data_loss("plan: {} acts {} times a step on regst {}, ready {} times a step", task_label(t),
                           t->acts_per_step(), r, regst->readies_per_step());
    for (int64_t r : *t->outputs()) {
      const plan::RegstDesc* regst = find_regst(p, r);
      if (regst == nullptr) return data_loss("plan: {} writes regst {}, which is not in the plan", task_label(t), r);
      if (regst->producer() != t->id())
        return data_loss("plan: {} writes regst {} produced by another task", task_label(t), r);
    }
    if (!conf_ok(p, t))
      return data_loss("plan: {} lacks a valid {} conf", task_label(t), plan::EnumNameTaskKind(t->kind()));
  }
  for (const plan::RegstDesc* r : *p.regsts()) {
    if (!resolves(r->producer()))
      return data_loss("plan: regst {} names producer {} that is not in the plan", r->id(),
                       ActorId::to_string(r->producer()));
    if (r->consumers() == nullptr || r->shape() == nullptr || r->sbp() == nullptr)
      return data_loss("plan: regst {} lacks consumers, shape or sbp", r->id());
    for (uint64_t c : *r->consumers())
      if (!resolves(c))
        return data_loss("plan: regst {} names consumer {} that is not in the plan", r->id(), ActorId::to_string(c));
    if (r->register_num() < 1) return data_loss("plan: regst {} has register_num {}", r->id(), r->register_num());
    if (!known(r->dtype()))
      return data_loss("plan: regst {} has dtype {}, which this build does not know", r->id(),
                       static_cast<int>(r->dtype()));
    if (r->device() < -1 || r->device() >= p.devices_per_node())
      return data_loss("plan: regst {} is on device {} of {}", r->id(), r->device(), p.devices_per_node());
  }
  for (const plan::Dataset* d : *p.datasets())
    if (d->tensors() != nullptr)
      for (const plan::InlineTensor* t : *d->tensors())
        if (!known(t->dtype()))
          return data_loss("plan: an inline tensor of a dataset has dtype {}, which this build does not know",
                           static_cast<int>(t->dtype()));
  return {};
}

}  // namespace

StatusOr<const plan::Plan*> verify_plan(std::string_view bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 8 || !plan::PlanBufferHasIdentifier(data))
    return data_loss("plan: {} bytes do not hold a plan (no '{}' identifier)", bytes.size(), plan::PlanIdentifier());
  // Every table takes at least 4 bytes (its vtable offset), so bytes / 4
  // bounds the tables of any well-formed plan: big plans are not refused
  // for their size alone, and a corrupt one still cannot make the verifier
  // visit more than its bytes allow.
  const size_t max_tables = std::max<size_t>(10'000'000, bytes.size() / 4);
  flatbuffers::Verifier verifier(data, bytes.size(), /*max_depth=*/64, max_tables);
  if (!plan::VerifyPlanBuffer(verifier))
    return data_loss("plan: {} bytes fail FlatBuffers verification (truncated or corrupt)", bytes.size());
  const plan::Plan* p = plan::GetPlan(data);
  if (p->version() != kPlanVersion)
    return Status(Code::kFailedPrecondition,
                  fmt::format("plan: version {}, this build reads version {}", p->version(), kPlanVersion));
  if (const std::string field = misaligned_vector(*p); !field.empty())
    return data_loss("plan: {} bytes: {} is a vector of 8-byte values that is not 8-byte aligned (corrupt)",
                     bytes.size(), field);
  RILL_RETURN_IF_ERROR(check_references(*p));
  return p;
}

DType read_dtype(plan::DType dtype) {
  switch (dtype) {
    case plan::DType::F32: return DType::kF32;
    case plan::DType::I32: return DType::kI32;
    case plan::DType::BF16: return DType::kBF16;
    case plan::DType::F16: return DType::kF16;
  }
  std::abort();  // verify_plan refused it
}

NdSbp read_sbp(const plan::NdSbp* sbp) {
  if (sbp == nullptr) return Sbp::broadcast();
  auto one = [](const plan::Sbp& s) {
    switch (s.kind()) {
      case plan::SbpKind::Split: return Sbp::split(s.axis());
      case plan::SbpKind::Broadcast: return Sbp::broadcast();
      case plan::SbpKind::PartialSum: return Sbp::partial_sum();
    }
    return Sbp::broadcast();
  };
  return NdSbp(one(sbp->across()), one(sbp->within()));
}

}  // namespace rill::compiler
