// A source's index fields (token ids, labels) against the bounds of the ops
// reading them (SourceConf.index_bounds, OpDef::index_bound): a value
// outside is an error naming it, where it lies in the data and the op.
// Sources run it before their first step (node_bodies.cc); `rill check`
// runs it over a plan of the job when the data can be read here.
// Any thread; reads every sample of each bounded field once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>

#include "base/status.h"
#include "compiler/plan_generated.h"
#include "kernels/data/dataset.h"
#include "kernels/data/dataset_spec.h"

namespace rill {

// `fields[f]` is the dataset field source output f reads, `inputs[f]` the
// input it makes. `checked` skips (dataset, field, bound) already checked
// and records the ones checked now.
Status check_source_indices(const plan::SourceConf& conf, const Dataset& data, const DatasetSpec& spec,
                            std::span<const int> fields, std::span<const std::string> inputs,
                            std::set<std::tuple<int, int, int64_t>>* checked);

// Every source of `plan` as above, loading each dataset once. A dataset
// that cannot be loaded here, or is read from a pipe, is skipped (`rill
// check` has said why).
// `opened`: datasets loaded already, by name (`rill check` loads each once).
Status check_plan_indices(const plan::Plan& plan,
                          const std::map<std::string, std::shared_ptr<const Dataset>>* opened = nullptr);

}  // namespace rill
