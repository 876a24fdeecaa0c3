// node_plan: cuts one node's plan out of a whole plan; find_regst and
// find_task: look-ups by global id that work on both kinds of plan.
#include <flatbuffers/reflection.h>

#include <algorithm>
#include <set>

#include "compiler/compiler.h"
#include "compiler/plan_bfbs_generated.h"

namespace rill::compiler {
namespace {

// The Plan fields node_plan writes itself; the others are copied whole by
// reflection. A Plan field added to the schema but not here is an error, so a
// node plan never silently drops one.
// The RegstDesc fields another node's regst is rebuilt with (its consumers
// cut to the node's own, as a node compiling alone writes it); likewise an
// error if the schema grows one.
const std::set<std::string> kRegstFields = {"id",       "name",  "producer",      "consumers", "register_num",
                                            "dtype",    "shape", "logical_shape", "sbp",       "bytes",
                                            "is_model", "device", "readies_per_step"};

flatbuffers::Offset<plan::RegstDesc> foreign_regst(flatbuffers::FlatBufferBuilder& b, const plan::RegstDesc& r,
                                                   int node) {
  std::vector<uint64_t> consumers;
  if (r.consumers() != nullptr)
    for (uint64_t c : *r.consumers())
      if (static_cast<int>(ActorId::node(c)) == node) consumers.push_back(c);
  auto longs = [&](const flatbuffers::Vector<int64_t>* v) {
    return b.CreateVector(v == nullptr ? std::vector<int64_t>() : std::vector<int64_t>(v->begin(), v->end()));
  };
  const plan::NdSbp sbp = r.sbp() != nullptr ? *r.sbp() : plan::NdSbp();
  return plan::CreateRegstDesc(b, r.id(), b.CreateString(r.name() ? r.name()->str() : std::string()), r.producer(),
                               b.CreateVector(consumers), r.register_num(), r.dtype(), longs(r.shape()),
                               longs(r.logical_shape()), &sbp, r.bytes(), r.is_model(), r.device(),
                               r.readies_per_step());
}

const std::set<std::string> kPlanFields = {"version",   "job_name",         "steps",    "global_batch", "log_every",
                                           "num_nodes", "devices_per_node", "datasets", "tasks",        "regsts",
                                           "node",      "num_tasks",        "placements", "micro_batches",
                                           "schedule",  "stages",           "allow_tf32", "reuse_memory",
                                           "cuda_graphs", "comm_groups", "natural_order_because"};

// Binary search for the element of `v` whose key(element) is `key`, in a vector
// sorted by key; after a direct hit at position `key` (whole plans).
template <typename T, typename Key>
const T* find_sorted(const flatbuffers::Vector<flatbuffers::Offset<T>>* v, int64_t key, Key key_of) {
  if (v == nullptr || key < 0) return nullptr;
  const int64_t size = v->size();
  if (key < size && key_of(v->Get(static_cast<uint32_t>(key))) == key) return v->Get(static_cast<uint32_t>(key));
  int64_t lo = 0, hi = size;  // the answer, if any, is in [lo, hi)
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int64_t at = key_of(v->Get(static_cast<uint32_t>(mid)));
    if (at == key) return v->Get(static_cast<uint32_t>(mid));
    if (at < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return nullptr;
}

StatusOr<const reflection::Object*> object(const reflection::Schema& schema, const char* name) {
  const reflection::Object* o = schema.objects()->LookupByKey(name);
  if (o == nullptr) return internal_error("plan schema has no table {}", name);
  return o;
}

}  // namespace

const plan::RegstDesc* find_regst(const plan::Plan& p, int64_t id) {
  return find_sorted(p.regsts(), id, [](const plan::RegstDesc* r) { return r->id(); });
}

const plan::Task* find_task(const plan::Plan& p, uint64_t id) {
  const plan::Task* t =
      find_sorted(p.tasks(), ActorId::index(id), [](const plan::Task* t) { return int64_t{ActorId::index(t->id())}; });
  return t != nullptr && t->id() == id ? t : nullptr;
}

StatusOr<std::string> node_plan(std::string_view whole_plan_bytes, int node) {
  auto verified = verify_plan(whole_plan_bytes);
  if (!verified.ok()) return verified.status().with_context(fmt::format("node_plan({})", node));
  const plan::Plan& p = **verified;
  if (p.node() != -1)
    return invalid_argument("node_plan({}): the plan is node {}'s already, not a whole plan", node, p.node());
  if (node < 0 || node >= p.num_nodes())
    return invalid_argument("node_plan: node {} is not in the plan's nodes 0 to {}", node, p.num_nodes() - 1);

  const reflection::Schema* schema = reflection::GetSchema(plan::PlanBinarySchema::data());
  RILL_ASSIGN_OR_RETURN(const reflection::Object* plan_def, object(*schema, "rill.plan.Plan"));
  RILL_ASSIGN_OR_RETURN(const reflection::Object* task_def, object(*schema, "rill.plan.Task"));
  RILL_ASSIGN_OR_RETURN(const reflection::Object* regst_def, object(*schema, "rill.plan.RegstDesc"));
  RILL_ASSIGN_OR_RETURN(const reflection::Object* dataset_def, object(*schema, "rill.plan.Dataset"));
  RILL_ASSIGN_OR_RETURN(const reflection::Object* group_def, object(*schema, "rill.plan.CommGroup"));
  for (const reflection::Field* f : *plan_def->fields())
    if (kPlanFields.count(f->name()->str()) == 0)
      return internal_error("node_plan does not know Plan field '{}'", f->name()->str());
  for (const reflection::Field* f : *regst_def->fields())
    if (kRegstFields.count(f->name()->str()) == 0)
      return internal_error("node_plan does not know RegstDesc field '{}'", f->name()->str());

  // The regsts this node's tasks touch; in a verified whole plan, id == position.
  std::vector<bool> keep(p.regsts()->size(), false);
  for (const plan::Task* t : *p.tasks()) {
    if (t->node() != node) continue;
    for (int64_t r : *t->inputs()) keep[static_cast<size_t>(r)] = true;
    for (int64_t r : *t->outputs()) keep[static_cast<size_t>(r)] = true;
  }

  flatbuffers::FlatBufferBuilder b(4096);
  auto copy = [&](const reflection::Object& def, const void* table) {
    return flatbuffers::CopyTable(b, *schema, def, *reinterpret_cast<const flatbuffers::Table*>(table)).o;
  };
  // Datasets are all kept, so Source confs' indices stay valid.
  std::vector<flatbuffers::Offset<plan::Dataset>> datasets;
  for (const plan::Dataset* d : *p.datasets()) datasets.push_back(copy(*dataset_def, d));
  std::vector<flatbuffers::Offset<plan::Task>> tasks;
  for (const plan::Task* t : *p.tasks())
    if (t->node() == node) tasks.push_back(copy(*task_def, t));
  std::vector<flatbuffers::Offset<plan::RegstDesc>> regsts;
  for (uint32_t i = 0; i < p.regsts()->size(); ++i) {
    if (!keep[i]) continue;
    const plan::RegstDesc* r = p.regsts()->Get(i);
    regsts.push_back(static_cast<int>(ActorId::node(r->producer())) == node ? copy(*regst_def, r)
                                                                            : foreign_regst(b, *r, node));
  }
  // Communicators whole: every node knows the order its peers follow.
  std::vector<flatbuffers::Offset<plan::CommGroup>> groups;
  if (p.comm_groups() != nullptr)
    for (const plan::CommGroup* g : *p.comm_groups()) groups.push_back(copy(*group_def, g));
  std::vector<flatbuffers::Offset<flatbuffers::String>> placements;
  if (p.placements() != nullptr)
    for (const flatbuffers::String* s : *p.placements()) placements.push_back(b.CreateString(s->str()));
  auto root =
      plan::CreatePlan(b, p.version(), b.CreateString(p.job_name() ? p.job_name()->str() : std::string()), p.steps(),
                       p.global_batch(), p.log_every(), p.num_nodes(), p.devices_per_node(), b.CreateVector(datasets),
                       b.CreateVector(tasks), b.CreateVector(regsts), node, p.num_tasks(), b.CreateVector(placements),
                       p.micro_batches(), b.CreateString(p.schedule() ? p.schedule()->str() : std::string()),
                       p.stages(), p.allow_tf32(), p.reuse_memory(), p.cuda_graphs(),
                       groups.empty() ? 0 : b.CreateVector(groups),
                       p.natural_order_because() ? b.CreateString(p.natural_order_because()->str()) : 0);
  plan::FinishPlanBuffer(b, root);
  std::string out(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
  auto check = verify_plan(out);
  if (!check.ok())
    return internal_error("node_plan({}) wrote a plan that does not verify: {}", node, check.status().to_string());
  return out;
}

}  // namespace rill::compiler
