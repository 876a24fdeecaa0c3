#include "actor/gradient_compression.h"

#include <cmath>

namespace rill {

void Bf16ErrorFeedback::compress(std::span<const float> in, std::span<BFloat16> wire) {
  if (carried_.size() != in.size()) carried_.assign(in.size(), 0.0f);
  for (size_t i = 0; i < in.size(); ++i) {
    const float value = in[i] + carried_[i];
    wire[i] = BFloat16::from_float(value);
    // A step whose gradients overflowed (skipped under loss scaling) must
    // not carry inf - inf into every later one.
    const float lost = value - wire[i].to_float();
    carried_[i] = std::isfinite(lost) ? lost : 0.0f;
  }
}

void Bf16ErrorFeedback::widen(std::span<const BFloat16> wire, std::span<float> out) {
  for (size_t i = 0; i < wire.size(); ++i) out[i] = wire[i].to_float();
}

}  // namespace rill
