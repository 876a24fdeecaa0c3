// verify_plan: the checks a runtime runs before trusting plan bytes.
#include <flatbuffers/flatbuffers.h>

#include "compiler/compiler.h"

namespace rill::compiler {
namespace {

// The task at position ActorId::index(id), if it has that id.
const plan::Task* task_of(const plan::Plan& p, uint64_t id) {
  uint32_t index = ActorId::index(id);
  if (index >= p.tasks()->size()) return nullptr;
  const plan::Task* t = p.tasks()->Get(index);
  return t->id() == id ? t : nullptr;
}

Status check_references(const plan::Plan& p) {
  if (p.tasks() == nullptr || p.regsts() == nullptr || p.datasets() == nullptr)
    return data_loss("plan: tasks, regsts or datasets missing");
  const uint32_t num_regsts = p.regsts()->size();
  for (uint32_t i = 0; i < p.tasks()->size(); ++i) {
    const plan::Task* t = p.tasks()->Get(i);
    if (ActorId::index(t->id()) != i)
      return data_loss("plan: task {} has actor id {} naming index {}", i, ActorId::to_string(t->id()),
                       ActorId::index(t->id()));
    if (t->thread() != ActorId::thread_key(t->id())) return data_loss("plan: task {} has a wrong thread key", i);
    if (t->inputs() == nullptr || t->outputs() == nullptr) return data_loss("plan: task {} lacks inputs or outputs", i);
    for (int64_t r : *t->inputs())
      if (r < 0 || r >= num_regsts) return data_loss("plan: task {} reads regst {} of {}", i, r, num_regsts);
    for (int64_t r : *t->outputs()) {
      if (r < 0 || r >= num_regsts) return data_loss("plan: task {} writes regst {} of {}", i, r, num_regsts);
      if (p.regsts()->Get(static_cast<uint32_t>(r))->producer() != t->id())
        return data_loss("plan: task {} writes regst {} produced by another task", i, r);
    }
    bool conf_ok = true;
    switch (t->kind()) {
      case plan::TaskKind::Source:
        conf_ok = t->source() != nullptr && t->source()->fields() != nullptr && t->source()->dataset() >= 0 &&
                  static_cast<uint32_t>(t->source()->dataset()) < p.datasets()->size();
        break;
      case plan::TaskKind::Variable: conf_ok = t->variable() != nullptr; break;
      case plan::TaskKind::Sink:
        conf_ok = t->sink() != nullptr && t->sink()->names() != nullptr && t->sink()->partial() != nullptr &&
                  t->sink()->names()->size() == t->inputs()->size() &&
                  t->sink()->partial()->size() == t->inputs()->size();
        break;
      case plan::TaskKind::Boxing:
        conf_ok = t->boxing() != nullptr && t->boxing()->in_sbp() != nullptr && t->boxing()->out_sbp() != nullptr;
        break;
      default: break;
    }
    if (!conf_ok)
      return data_loss("plan: task {} ({}) lacks a valid {} conf", i, t->name() ? t->name()->str() : "",
                       plan::EnumNameTaskKind(t->kind()));
  }
  for (uint32_t i = 0; i < num_regsts; ++i) {
    const plan::RegstDesc* r = p.regsts()->Get(i);
    if (r->id() != i) return data_loss("plan: regst at {} has id {}", i, r->id());
    if (task_of(p, r->producer()) == nullptr)
      return data_loss("plan: regst {} names producer {} that is not in the plan", i, r->producer());
    if (r->consumers() == nullptr || r->shape() == nullptr || r->sbp() == nullptr)
      return data_loss("plan: regst {} lacks consumers, shape or sbp", i);
    for (uint64_t c : *r->consumers())
      if (task_of(p, c) == nullptr) return data_loss("plan: regst {} names consumer {} that is not in the plan", i, c);
    if (r->register_num() < 1) return data_loss("plan: regst {} has register_num {}", i, r->register_num());
  }
  return {};
}

}  // namespace

StatusOr<const plan::Plan*> verify_plan(std::string_view bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 8 || !plan::PlanBufferHasIdentifier(data))
    return data_loss("plan: {} bytes do not hold a plan (no '{}' identifier)", bytes.size(), plan::PlanIdentifier());
  flatbuffers::Verifier verifier(data, bytes.size(), /*max_depth=*/64, /*max_tables=*/10'000'000);
  if (!plan::VerifyPlanBuffer(verifier))
    return data_loss("plan: {} bytes fail FlatBuffers verification (truncated or corrupt)", bytes.size());
  const plan::Plan* p = plan::GetPlan(data);
  if (p->version() != kPlanVersion)
    return Status(Code::kFailedPrecondition,
                  fmt::format("plan: version {}, this build reads version {}", p->version(), kPlanVersion));
  RILL_RETURN_IF_ERROR(check_references(*p));
  return p;
}

}  // namespace rill::compiler
