#include "compiler/autocast.h"

#include <algorithm>

namespace rill::compiler {

Autocast::Autocast(graph::Precision precision) {
  switch (precision) {
    case graph::Precision::kBF16:
      on_ = true;
      dtype_ = DType::kBF16;
      break;
    case graph::Precision::kF16:
      on_ = true;
      dtype_ = DType::kF16;
      break;
    case graph::Precision::kF32:
    case graph::Precision::kTF32:
      break;
  }
}

std::vector<OpNode> Autocast::casts_for(OpNode* op, const LogicalGraph& g) {
  std::vector<OpNode> casts;
  if (!on_ || op->type != "matmul" || op->inputs.size() != 2) return casts;
  for (const std::string& in : op->inputs) {
    const LogicalTensor* t = g.find(in);
    if (t == nullptr || t->meta.dtype != DType::kF32) return casts;  // the op's own check names what is wrong
  }
  std::vector<std::string> names;  // op names taken by casts not yet appended
  for (std::string& in : op->inputs) {
    auto key = std::make_tuple(in, op->placement, op->recompute);
    if (auto it = made_.find(key); it != made_.end()) {
      in = it->second;
      continue;
    }
    std::string name = g.free_op_name(fmt::format("{}.{}", in, dtype_name(dtype_)), 1);
    for (int k = 1; std::find(names.begin(), names.end(), name) != names.end(); ++k)
      name = g.free_op_name(fmt::format("{}.{}_{}", in, dtype_name(dtype_), k), 1);
    names.push_back(name);
    OpNode cast;
    cast.name = name;
    cast.type = "cast";
    cast.inputs = {in};
    cast.outputs = {name};
    cast.attrs.set("dtype", std::string(dtype_name(dtype_)));
    cast.output_hints.resize(1);
    cast.placement = op->placement;
    cast.recompute = op->recompute;
    made_[key] = name;
    in = name;
    casts.push_back(std::move(cast));
  }
  return casts;
}

}  // namespace rill::compiler
