#include "runtime/node/index_check.h"

#include <map>
#include <memory>
#include <vector>

#include "compiler/compiler.h"
#include "kernels/data/dataset_peek.h"
#include "runtime/node/plan_reader.h"

namespace rill {

Status check_source_indices(const plan::SourceConf& conf, const Dataset& data, const DatasetSpec& spec,
                            std::span<const int> fields, std::span<const std::string> inputs,
                            std::set<std::tuple<int, int, int64_t>>* checked) {
  if (!conf.index_bounds() || conf.index_bounds()->size() != fields.size() || inputs.size() != fields.size())
    return {};
  for (size_t f = 0; f < fields.size(); ++f) {
    const auto at = static_cast<flatbuffers::uoffset_t>(f);
    const int64_t bound = conf.index_bounds()->Get(at);
    if (bound <= 0 || data.field_meta(fields[f]).dtype != DType::kI32 ||
        !checked->insert({conf.dataset(), fields[f], bound}).second)
      continue;
    if (auto outside = data.find_outside(fields[f], bound)) {
      const std::string reader = conf.index_readers() && conf.index_readers()->size() > at
                                     ? conf.index_readers()->Get(at)->str()
                                     : std::string("an op");
      const std::string field = conf.fields() && conf.fields()->size() > at ? conf.fields()->Get(at)->str() : "";
      return index_outside(inputs[f], field, spec, *outside, bound, reader);
    }
  }
  return {};
}

Status check_plan_indices(const plan::Plan& plan,
                          const std::map<std::string, std::shared_ptr<const Dataset>>* opened) {
  if (!plan.tasks() || !plan.datasets()) return {};
  std::map<int, std::shared_ptr<const Dataset>> loaded;
  std::set<std::tuple<int, int, int64_t>> checked;
  for (const plan::Task* task : *plan.tasks()) {
    const plan::SourceConf* conf = task->source();
    if (task->kind() != plan::TaskKind::Source || !conf || !conf->fields() || !task->outputs() ||
        conf->dataset() < 0 || static_cast<flatbuffers::uoffset_t>(conf->dataset()) >= plan.datasets()->size())
      continue;
    const DatasetSpec spec = read_dataset(*plan.datasets()->Get(static_cast<flatbuffers::uoffset_t>(conf->dataset())));
    auto [it, fresh] = loaded.try_emplace(conf->dataset());
    if (fresh) {
      if (opened != nullptr && opened->count(spec.name) > 0) {
        it->second = opened->at(spec.name);
      } else if (unreadable_here(spec).empty()) {  // never a pipe: `rill check` must not wait on one
        auto data = Dataset::open(spec);
        if (data.ok()) it->second = std::move(*data);
      }
    }
    if (!it->second) continue;
    std::vector<int> fields;
    std::vector<std::string> inputs;
    for (flatbuffers::uoffset_t f = 0; f < conf->fields()->size() && f < task->outputs()->size(); ++f) {
      RILL_ASSIGN_OR_RETURN(int index, it->second->field_index(conf->fields()->Get(f)->str()));
      fields.push_back(index);
      const plan::RegstDesc* out = compiler::find_regst(plan, task->outputs()->Get(f));
      inputs.push_back(out ? read_string(out->name()) : conf->fields()->Get(f)->str());
    }
    RILL_RETURN_IF_ERROR(check_source_indices(*conf, *it->second, spec, fields, inputs, &checked));
  }
  return {};
}

}  // namespace rill
