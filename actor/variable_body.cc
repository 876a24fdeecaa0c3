#include "actor/body.h"

#include <cstring>

namespace rill {

VariableBody::VariableBody(const OpDef* init, Attrs init_attrs, Shape logical_shape, std::vector<int64_t> offset,
                           const OpDef* update, Attrs update_attrs, TensorMeta meta)
    : init_(init),
      init_attrs_(std::move(init_attrs)),
      logical_shape_(std::move(logical_shape)),
      offset_(std::move(offset)),
      update_(update),
      update_attrs_(std::move(update_attrs)) {
  int num_state = update_ ? update_->num_state : 0;
  state_storage_.resize(num_state);
  for (auto& state : state_storage_) {
    state.assign(static_cast<size_t>(num_elements(meta.shape)), 0.0f);
    state_views_.push_back(TensorView{state.data(), meta.shape, meta.dtype});
  }
  update_inputs_.resize(2, TensorView{nullptr, meta.shape, meta.dtype});
}

Status VariableBody::init(const TensorView& model, std::span<const float> initial_values) {
  if (!initial_values.empty()) {
    if (static_cast<int64_t>(initial_values.size()) != model.size())
      return invalid_argument("initial values hold {} elements, the variable piece {}", initial_values.size(),
                              model.size());
    std::memcpy(model.data, initial_values.data(), model.bytes());
    return {};
  }
  TensorView out = model;
  KernelContext ctx;
  ctx.outputs = std::span<TensorView>(&out, 1);
  ctx.logical_output = logical_shape_;
  ctx.output_offset = offset_;
  ctx.attrs = &init_attrs_;
  return init_->cpu(ctx);
}

Status VariableBody::act(const ActIo& io) {
  update_inputs_[0].data = io.outputs[0]->data;  // the model slot, updated in place
  update_inputs_[1].data = io.inputs[0]->data;   // its gradient
  KernelContext ctx;
  ctx.inputs = update_inputs_;
  ctx.state = state_views_;
  ctx.attrs = &update_attrs_;
  ctx.step = io.step;
  return update_->cpu(ctx);
}

}  // namespace rill
