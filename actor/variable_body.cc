#include "actor/body.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace rill {

VariableBody::VariableBody(const OpDef* init, Attrs init_attrs, Shape logical_shape, std::vector<int64_t> offset,
                           const OpDef* update, OpParams update_params, TensorMeta meta)
    : init_(init),
      init_attrs_(std::move(init_attrs)),
      logical_shape_(std::move(logical_shape)),
      offset_(std::move(offset)),
      update_(update),
      update_params_(std::move(update_params)),
      update_kernel_(update ? update->cpu : nullptr) {
  int num_state = update_ ? update_->num_state : 0;
  state_storage_.resize(num_state);
  for (auto& state : state_storage_) {
    state.assign(static_cast<size_t>(num_elements(meta.shape)), 0.0f);
    state_views_.push_back(TensorView{state.data(), meta.shape, meta.dtype});
  }
  update_inputs_.resize(2, TensorView{nullptr, meta.shape, meta.dtype});
}

Status VariableBody::use_device(CudaContext* cuda, KernelFn update_kernel) {
  if (update_ && !update_kernel) return invalid_argument("update op '{}' has no CUDA kernel", update_->type);
  cuda_ = cuda;
  update_kernel_ = update_kernel;
  for (size_t i = 0; i < state_storage_.size(); ++i) {
    RILL_ASSIGN_OR_RETURN(void* p, cuda_->allocate(state_storage_[i].size() * sizeof(float), "optimizer state"));
    device_state_.emplace_back(p, DeviceFree{cuda_});
    state_views_[i].data = p;  // zeroed, as the host state starts
  }
  return {};
}

// Initializers run on the host, on every device type, so a variable starts
// bitwise the same on CPUs and GPUs; a GPU's copy is then made from it.
Status VariableBody::init(const TensorView& model, std::span<const float> initial_values) {
  if (!initial_values.empty() && static_cast<int64_t>(initial_values.size()) != model.size())
    return invalid_argument("initial values hold {} elements, the variable piece {}", initial_values.size(),
                            model.size());
  std::vector<float> staging;
  TensorView out = model;
  if (cuda_) {
    staging.resize(static_cast<size_t>(model.size()));
    out.data = staging.data();
  }
  if (!initial_values.empty()) {
    std::memcpy(out.data, initial_values.data(), model.bytes());
  } else {
    KernelContext ctx;
    ctx.outputs = std::span<TensorView>(&out, 1);
    ctx.logical_output = logical_shape_;
    ctx.output_offset = offset_;
    ctx.attrs = &init_attrs_;
    RILL_RETURN_IF_ERROR(init_->cpu(ctx));
  }
  if (!cuda_) return {};
  RILL_RETURN_IF_ERROR(cuda_->copy(model.data, staging.data(), model.bytes(), CopyKind::kHostToDevice, "variable init"));
  return cuda_->synchronize("variable init");
}

Status VariableBody::read_model(const TensorView& model, std::vector<float>* out) {
  out->resize(static_cast<size_t>(model.size()));
  if (!cuda_) {
    std::memcpy(out->data(), model.data, model.bytes());
    return {};
  }
  RILL_RETURN_IF_ERROR(cuda_->activate("variable read"));
  RILL_RETURN_IF_ERROR(cuda_->copy(out->data(), model.data, model.bytes(), CopyKind::kDeviceToHost, "variable read"));
  return cuda_->synchronize("variable read");
}

StatusOr<std::span<const std::vector<float>>> VariableBody::state() {
  if (cuda_) {
    RILL_RETURN_IF_ERROR(cuda_->activate("optimizer state read"));
    for (size_t i = 0; i < state_storage_.size(); ++i)
      RILL_RETURN_IF_ERROR(cuda_->copy(state_storage_[i].data(), device_state_[i].get(),
                                       state_storage_[i].size() * sizeof(float), CopyKind::kDeviceToHost,
                                       "optimizer state read"));
    RILL_RETURN_IF_ERROR(cuda_->synchronize("optimizer state read"));
  }
  return std::span<const std::vector<float>>(state_storage_);
}

Status VariableBody::act(const ActIo& io) {
  RILL_RETURN_IF_ERROR(update(*io.outputs[0], *io.inputs[0], io.step));  // the model slot, updated in place
  return maybe_snapshot(*io.outputs[0], io.step);
}

Status VariableBody::update(const TensorView& model, const TensorView& grad, int64_t step) {
  update_inputs_[0].data = model.data;
  update_inputs_[1].data = grad.data;
  KernelContext ctx;
  ctx.inputs = update_inputs_;
  ctx.state = state_views_;
  ctx.params = update_params_.get();
  ctx.step = step;
  if (cuda_) RILL_RETURN_IF_ERROR(cuda_->activate(update_->type));
  ctx.cuda = cuda_;
  return update_kernel_(ctx);
}

Status VariableBody::maybe_snapshot(const TensorView& model, int64_t step) {
  int64_t done = step + 1;
  if (snapshot_ && ((every_ > 0 && done % every_ == 0) || (end_ && done == end_->end()))) {
    if (!cuda_) {
      snapshot_(done, std::span<const float>(model.f32(), static_cast<size_t>(model.size())), state_storage_);
    } else {
      RILL_RETURN_IF_ERROR(read_model(model, &model_host_));
      RILL_ASSIGN_OR_RETURN(auto state, state());
      snapshot_(done, model_host_, state);
    }
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
  if (!cuda_) return {};
  RILL_RETURN_IF_ERROR(cuda_->copy(device_state_[index].get(), state_storage_[index].data(), values.size() * sizeof(float),
                                   CopyKind::kHostToDevice, "optimizer state load"));
  return cuda_->synchronize("optimizer state load");
}

}  // namespace rill
