#include "actor/body.h"

#include <algorithm>
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
  RILL_RETURN_IF_ERROR(update_->cpu(ctx));
  int64_t done = io.step + 1;
  if (snapshot_ && ((every_ > 0 && done % every_ == 0) || done == total_steps_)) {
    const TensorView& model = *io.outputs[0];
    snapshot_(done, std::span<const float>(model.f32(), static_cast<size_t>(model.size())), state_storage_);
  }
  return {};
}

Status VariableBody::load_state(int index, std::span<const float> values) {
  if (index < 0 || index >= static_cast<int>(state_storage_.size()))
    return invalid_argument("optimizer state {} does not exist ({} state tensors)", index, state_storage_.size());
  if (values.size() != state_storage_[index].size())
    return invalid_argument("optimizer state holds {} elements, the checkpoint {}", state_storage_[index].size(),
                            values.size());
  std::copy(values.begin(), values.end(), state_storage_[index].begin());
  return {};
}

}  // namespace rill
