#include "runtime/eager/eager.h"

#include <algorithm>
#include <cstring>

#include "kernels/op.h"

namespace rill::eager {

HostTensor HostTensor::of(TensorMeta meta) {
  HostTensor t;
  t.bytes.assign(meta.bytes(), std::byte{0});
  t.meta = std::move(meta);
  return t;
}

HostTensor HostTensor::floats(Shape shape, const std::vector<float>& values) {
  HostTensor t = of({std::move(shape), DType::kF32});
  std::memcpy(t.bytes.data(), values.data(), std::min(t.bytes.size(), values.size() * sizeof(float)));
  return t;
}

StatusOr<HostTensor> HostTensor::variable(const std::string& name, TensorMeta meta, const std::vector<float>& values) {
  switch (meta.dtype) {
    case DType::kF32:
    case DType::kI32: break;  // 4-byte words either way
    case DType::kBF16:
    case DType::kF16:
      return invalid_argument("variable '{}': a variable is f32 or i32, not {}", name, dtype_name(meta.dtype));
  }
  HostTensor t = of(std::move(meta));
  if (values.size() * sizeof(float) != t.bytes.size())
    return invalid_argument("variable '{}': {} values for a tensor of shape {}", name, values.size(),
                            shape_string(t.meta.shape));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

TensorView HostTensor::view() const {
  return TensorView{const_cast<std::byte*>(bytes.data()), meta.shape, meta.dtype};
}

StatusOr<Tensors> run_forward(const graph::Job& job, const Tensors& given, const std::vector<std::string>& wanted,
                              Tensors* reuse) {
  Tensors spare;
  if (reuse != nullptr) spare.swap(*reuse);
  // Output `name` of `meta`, zeroed: an earlier run's buffer where it fits.
  auto output = [&spare](const std::string& name, const TensorMeta& meta) {
    const auto it = spare.find(name);
    if (it == spare.end() || it->second.bytes.size() != meta.bytes()) return HostTensor::of(meta);
    HostTensor t = std::move(it->second);
    spare.erase(it);
    std::fill(t.bytes.begin(), t.bytes.end(), std::byte{0});
    t.meta = meta;
    return t;
  };
  // The ops `wanted` depends on: walk back from it over the ops' inputs.
  std::map<std::string, size_t> maker;
  for (size_t i = 0; i < job.ops.size(); ++i)
    for (const std::string& out : job.ops[i].outputs) maker[out] = i;
  std::vector<bool> needed(job.ops.size(), false);
  std::vector<std::string> todo = wanted;
  while (!todo.empty()) {
    const std::string name = todo.back();
    todo.pop_back();
    if (given.count(name)) continue;
    const auto it = maker.find(name);
    if (it == maker.end()) return invalid_argument("tensor '{}' is neither given nor made by an op", name);
    if (needed[it->second]) continue;
    needed[it->second] = true;
    for (const std::string& in : job.ops[it->second].inputs) todo.push_back(in);
  }
  Tensors made;
  std::vector<std::byte> scratch;
  for (size_t i = 0; i < job.ops.size(); ++i) {  // definition order is a topological order
    if (!needed[i]) continue;
    const graph::Op& op = job.ops[i];
    const OpDef* def = find_op(op.type);
    if (def != nullptr && def->identity_in_eval) def = find_op("identity");  // a forward run is inference
    if (def == nullptr || def->cpu == nullptr) return invalid_argument("op '{}': no CPU kernel for '{}'", op.name, op.type);
    std::vector<TensorMeta> metas;
    std::vector<TensorView> inputs;
    std::vector<Shape> shapes;
    for (const std::string& in : op.inputs) {
      const auto it = made.find(in);
      const auto old = given.find(in);
      const HostTensor* t = it != made.end() ? &it->second : old != given.end() ? &old->second : nullptr;
      if (t == nullptr) return internal_error("op '{}': input '{}' was not made", op.name, in);
      metas.push_back(t->meta);
      inputs.push_back(t->view());  // kernels read inputs only
      shapes.push_back(t->meta.shape);
    }
    std::vector<TensorMeta> out_metas;
    RILL_RETURN_IF_ERROR(infer_op(*def, op.attrs, metas, &out_metas).with_context(fmt::format("op '{}'", op.name)));
    std::vector<HostTensor> results;
    for (size_t k = 0; k < out_metas.size(); ++k)
      results.push_back(k < op.outputs.size() ? output(op.outputs[k], out_metas[k]) : HostTensor::of(out_metas[k]));
    std::vector<TensorView> outputs;
    for (HostTensor& t : results) outputs.push_back(t.view());
    scratch.assign(def->scratch_bytes ? def->scratch_bytes(op.attrs, metas) : 0, std::byte{0});
    KernelContext ctx;
    ctx.inputs = inputs;
    ctx.outputs = outputs;
    ctx.logical_inputs = shapes;
    ctx.attrs = &op.attrs;
    auto params = parse_params(*def, op.attrs);
    if (!params.ok()) return params.status().with_context(fmt::format("op '{}'", op.name));
    ctx.params = params->get();
    ctx.scratch = scratch;
    RILL_RETURN_IF_ERROR(def->cpu(ctx).with_context(fmt::format("op '{}'", op.name)));
    for (size_t k = 0; k < results.size() && k < op.outputs.size(); ++k) made[op.outputs[k]] = std::move(results[k]);
  }
  return made;
}

}  // namespace rill::eager
