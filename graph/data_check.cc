// check_job_data: each input against what its dataset's files hold.
#include <map>
#include <optional>

#include "graph/job_check.h"
#include "kernels/data/dataset_peek.h"

namespace rill::graph {

Status check_job_data(const Job& job, std::vector<std::string>* unreadable) {
  std::map<std::string, std::optional<std::vector<PeekedField>>> peeked;  // by dataset; nullopt: not known
  for (const Input& in : job.inputs) {
    const Dataset* spec = nullptr;
    for (const Dataset& d : job.datasets)
      if (d.name == in.dataset) spec = &d;
    if (spec == nullptr) continue;  // check_job names it
    auto [it, fresh] = peeked.try_emplace(spec->name);
    if (fresh) {
      auto fields = peek_dataset_fields(*spec);
      // Files that cannot be read here are the run's to check; a file read
      // here and found wrong is an error now.
      if (!fields.ok() && fields.status().code() != Code::kUnavailable) return fields.status();
      if (!fields.ok()) {
        if (unreadable) unreadable->push_back(fields.status().message());
        continue;
      }
      it->second = std::move(*fields);
    }
    if (!it->second) continue;
    for (const PeekedField& field : *it->second) {
      if (field.name != in.field) continue;
      const TensorMeta declared{in.shape, in.dtype};
      if (!data_agrees(declared, field.meta)) return data_mismatch(in.name, in.field, *spec, declared, field.meta);
    }
  }
  return {};
}

}  // namespace rill::graph
