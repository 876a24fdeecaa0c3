// A variable of several lanes (an async pserver's block): body.h.
#include <cmath>
#include <cstring>

#include "actor/body.h"

namespace rill {

LanedVariableBody::LanedVariableBody(VariableBody variable, int lanes, float dc_lambda)
    : variable_(std::move(variable)), lanes_(lanes), dc_lambda_(dc_lambda) {}

std::vector<PortSetSpec> LanedVariableBody::port_sets(size_t inputs, size_t outputs) const {
  std::vector<PortSetSpec> sets;
  for (int lane = 0; lane < lanes_; ++lane)
    sets.push_back({static_cast<size_t>(lane) < inputs ? std::vector<int>{lane} : std::vector<int>{},
                    static_cast<size_t>(lane) < outputs ? std::vector<int>{lane} : std::vector<int>{}});
  return sets;
}

Status LanedVariableBody::init(const TensorView& model, std::span<const float> initial_values) {
  RILL_RETURN_IF_ERROR(variable_.init(model, initial_values));
  values_.assign(model.f32(), model.f32() + model.size());
  if (dc_lambda_ > 0) {
    compensated_.resize(values_.size());
    mean_square_.assign(values_.size(), 0.0f);
  }
  return {};
}

Status LanedVariableBody::first_version(const ActIo& io) {
  std::memcpy(io.outputs[0]->data, values_.data(), values_.size() * sizeof(float));
  return {};
}

Status LanedVariableBody::act(const ActIo& io) {
  const TensorView& slot = *io.outputs[0];
  TensorView values{values_.data(), slot.shape, slot.dtype};
  TensorView grad = *io.inputs[0];
  if (dc_lambda_ > 0) {
    // Zheng et al. 2017, DC-ASGD-a: the gradient was computed at w_sent (the
    // slot's values, sent to this trainer when it last read); w has moved on
    // since. lambda adapts per element to the gradients' mean square, so the
    // term stays a fraction of g however large gradients are (a constant
    // lambda overshoots and diverges where they are large).
    const float* g = grad.f32();
    const float* sent = slot.f32();
    for (size_t i = 0; i < values_.size(); ++i) {
      mean_square_[i] = kDcMeanSquareDecay * mean_square_[i] + (1.0f - kDcMeanSquareDecay) * g[i] * g[i];
      const float lambda = mean_square_[i] > 0 ? dc_lambda_ / std::sqrt(mean_square_[i]) : 0.0f;
      compensated_[i] = g[i] + lambda * g[i] * g[i] * (values_[i] - sent[i]);
    }
    grad.data = compensated_.data();
  }
  const TensorView* inputs[] = {&grad};
  // The values the run starts from, before any lane's first update.
  if (!updated_) RILL_RETURN_IF_ERROR(variable_.replicate_start(values));
  updated_ = true;
  RILL_RETURN_IF_ERROR(variable_.update(values, inputs, io.step));
  std::memcpy(slot.data, values_.data(), values_.size() * sizeof(float));
  // One snapshot per step: lane 0's update of it.
  return io.set == 0 ? variable_.maybe_snapshot(values, io.step) : Status{};
}

Status LanedVariableBody::on_every_step(VariableBody::SnapshotFn fn, const TensorView& slot, int64_t steps_done) {
  // The values live here, not in the slot.
  return variable_.on_every_step(std::move(fn), TensorView{values_.data(), slot.shape, slot.dtype}, steps_done);
}

Status LanedVariableBody::read_model(const TensorView&, std::vector<float>* out) {
  *out = values_;
  return {};
}

}  // namespace rill
