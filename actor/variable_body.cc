#include "actor/body.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace rill {

VariableBody::VariableBody(const OpDef* init, Attrs init_attrs, Shape logical_shape, std::vector<int64_t> offset,
                           const OpDef* update, OpParams update_params, TensorMeta meta,
                           std::vector<TensorMeta> update_inputs)
    : init_(init),
      init_attrs_(std::move(init_attrs)),
      logical_shape_(std::move(logical_shape)),
      offset_(std::move(offset)),
      update_(update),
      update_params_(std::move(update_params)),
      update_kernel_(update ? update->cpu : nullptr) {
  const int num_state = update_ ? update_->num_state : 0;
  state_views_.assign(static_cast<size_t>(num_state), TensorView{nullptr, meta.shape, meta.dtype});
  update_inputs_.push_back(TensorView{nullptr, meta.shape, meta.dtype});
  for (const TensorMeta& in : update_inputs) update_inputs_.push_back(TensorView{nullptr, in.shape, in.dtype});
}

Status VariableBody::place_state(std::span<std::byte* const> tensors) {
  if (tensors.size() != state_views_.size())
    return internal_error("optimizer state: {} tensors placed for an update of {}", tensors.size(), state_views_.size());
  for (size_t i = 0; i < tensors.size(); ++i) state_views_[i].data = tensors[i];
  return {};
}

Status VariableBody::use_device(CudaContext* cuda, KernelFn update_kernel) {
  if (update_ && !update_kernel) return invalid_argument("update op '{}' has no CUDA kernel", update_->type);
  cuda_ = cuda;
  update_kernel_ = update_kernel;
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

StatusOr<std::vector<std::span<const float>>> VariableBody::state() {
  std::vector<std::span<const float>> out;
  for (const TensorView& v : state_views_)
    if (v.data == nullptr) return internal_error("optimizer state read before it was placed");
  if (!cuda_) {
    for (const TensorView& v : state_views_) out.emplace_back(v.f32(), static_cast<size_t>(v.size()));
    return out;
  }
  RILL_RETURN_IF_ERROR(cuda_->activate("optimizer state read"));
  state_host_.resize(state_views_.size());
  for (size_t i = 0; i < state_views_.size(); ++i) {
    state_host_[i].resize(static_cast<size_t>(state_views_[i].size()));
    RILL_RETURN_IF_ERROR(cuda_->copy(state_host_[i].data(), state_views_[i].data, state_views_[i].bytes(),
                                     CopyKind::kDeviceToHost, "optimizer state read"));
  }
  RILL_RETURN_IF_ERROR(cuda_->synchronize("optimizer state read"));
  for (const std::vector<float>& host : state_host_) out.emplace_back(host);
  return out;
}

Status VariableBody::act(const ActIo& io) {
  if (run_end_ && io.step == run_end_->first()) RILL_RETURN_IF_ERROR(replicate_start(*io.outputs[0]));
  RILL_RETURN_IF_ERROR(update(*io.outputs[0], io.inputs, io.step));  // the model slot, updated in place
  return maybe_snapshot(*io.outputs[0], io.step);
}

Status VariableBody::replicate_start(const TensorView& model) {
  // Before the first update, on the actor's thread as every copy: the
  // run's transports are up (at init they may not be), and the values and
  // optimizer state are still those the run started from.
  if (!replica_ || replica_every_ <= 0 || run_end_ == nullptr) return {};
  return tell(replica_, model, run_end_->first());
}

Status VariableBody::update(const TensorView& model, std::span<const TensorView* const> inputs, int64_t step) {
  if (inputs.size() + 1 != update_inputs_.size())
    return internal_error("update '{}' read {} inputs, its task has {}", update_->type, inputs.size(),
                          update_inputs_.size() - 1);
  update_inputs_[0].data = model.data;
  for (size_t i = 0; i < inputs.size(); ++i) update_inputs_[i + 1].data = inputs[i]->data;
  for (const TensorView& v : state_views_)
    if (v.data == nullptr) return internal_error("update '{}' before its optimizer state was placed", update_->type);
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
  if (keep_) RILL_RETURN_IF_ERROR(tell(keep_, model, done));
  const bool last = run_end_ && done == run_end_->end();
  if (snapshot_ && ((every_ > 0 && done % every_ == 0) || last)) RILL_RETURN_IF_ERROR(tell(snapshot_, model, done));
  if (replica_ && replica_every_ > 0 && (done % replica_every_ == 0 || last))
    RILL_RETURN_IF_ERROR(tell(replica_, model, done));
  return {};
}

Status VariableBody::tell(const SnapshotFn& fn, const TensorView& model, int64_t steps_done) {
  if (!cuda_) {
    // Views of the state in place, in a vector kept across steps: a live
    // job tells every step, and an act allocates nothing.
    told_state_.clear();
    for (const TensorView& v : state_views_) {
      if (v.data == nullptr) return internal_error("optimizer state read before it was placed");
      told_state_.emplace_back(v.f32(), static_cast<size_t>(v.size()));
    }
    fn(steps_done, std::span<const float>(model.f32(), static_cast<size_t>(model.size())), told_state_);
    return {};
  }
  RILL_ASSIGN_OR_RETURN(std::vector<std::span<const float>> state, state());
  RILL_RETURN_IF_ERROR(read_model(model, &model_host_));
  fn(steps_done, model_host_, state);
  // The host copies live for a checkpoint only; kept every step, they stay.
  if (!keep_) {
    std::vector<std::vector<float>>().swap(state_host_);
    std::vector<float>().swap(model_host_);
  }
  return {};
}

Status VariableBody::load_state(int index, std::span<const float> values) {
  if (index < 0 || index >= static_cast<int>(state_views_.size()))
    return invalid_argument("optimizer state {} does not exist ({} state tensors)", index, state_views_.size());
  const TensorView& to = state_views_[static_cast<size_t>(index)];
  if (static_cast<int64_t>(values.size()) != to.size())
    return invalid_argument("optimizer state holds {} elements, the checkpoint {}", to.size(), values.size());
  if (to.data == nullptr) return internal_error("optimizer state loaded before it was placed");
  if (!cuda_) {
    std::copy(values.begin(), values.end(), static_cast<float*>(to.data));
    return {};
  }
  RILL_RETURN_IF_ERROR(cuda_->activate("optimizer state load"));
  RILL_RETURN_IF_ERROR(cuda_->copy(to.data, values.data(), to.bytes(), CopyKind::kHostToDevice, "optimizer state load"));
  return cuda_->synchronize("optimizer state load");
}

}  // namespace rill
