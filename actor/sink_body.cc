#include "actor/body.h"

#include <algorithm>
#include <cmath>

namespace rill {

SinkBody::SinkBody(std::vector<std::string> input_names, std::vector<bool> partial, Listener listener,
                   std::vector<std::string> fetch, int64_t micro_batches, int ranks)
    : partial_(std::move(partial)),
      ranks_(std::max(0, ranks)),
      listener_(std::move(listener)),
      fetch_(std::move(fetch)),
      micro_batches_(std::max<int64_t>(1, micro_batches)) {
  std::vector<int> pieces;  // per metric, its inputs so far
  for (const std::string& name : input_names) {
    auto it = std::find(names_.begin(), names_.end(), name);
    first_piece_.push_back(it == names_.end());
    if (it == names_.end()) {
      metric_of_input_.push_back(static_cast<int>(names_.size()));
      names_.push_back(name);
      pieces.push_back(0);
    } else {
      metric_of_input_.push_back(static_cast<int>(it - names_.begin()));
    }
    rank_of_input_.push_back(pieces[static_cast<size_t>(metric_of_input_.back())]++);
  }
  values_.assign(names_.size(), 0.0);
  sums_.assign(names_.size(), 0.0);
  rank_values_.assign(names_.size() * static_cast<size_t>(ranks_), 0.0);
  rank_sums_.assign(rank_values_.size(), 0.0);
  auto loss = std::find(names_.begin(), names_.end(), "loss");
  if (loss != names_.end()) loss_metric_ = static_cast<int>(loss - names_.begin());
}

Status SinkBody::act(const ActIo& io) {
  std::fill(values_.begin(), values_.end(), 0.0);
  const size_t reported = partial_.size();
  for (size_t i = 0; i < reported && i < io.inputs.size(); ++i) {
    const TensorView& metric_value = *io.inputs[i];
    const double value = visit_dtype(metric_value.dtype, [&]<typename T>(std::type_identity<T>) {
      return static_cast<double>(float_of(*static_cast<const T*>(metric_value.data)));
    });
    const auto metric = static_cast<size_t>(metric_of_input_[i]);
    if (ranks_ > 0) {
      // Mirrored: a partial metric's inputs are the ranks' own values; a
      // broadcast one (one piece per node) is every rank's.
      const auto r = static_cast<size_t>(ranks_);
      if (partial_[i]) {
        rank_values_[metric * r + static_cast<size_t>(rank_of_input_[i] % ranks_)] = value;
        values_[metric] += value / ranks_;
      } else if (first_piece_[i]) {
        std::fill_n(rank_values_.begin() + static_cast<std::ptrdiff_t>(metric * r), r, value);
        values_[metric] = value;
      }
      continue;
    }
    // A partial piece adds to the sum; a broadcast metric is read once.
    if (!partial_[i] && !first_piece_[i]) continue;
    values_[metric] += value;
  }
  if (micro_batches_ > 1) {
    // The step's mean once its last micro-batch is in (each rank's too).
    for (size_t m = 0; m < values_.size(); ++m) sums_[m] += values_[m];
    for (size_t i = 0; i < rank_values_.size(); ++i) rank_sums_[i] += rank_values_[i];
    if (io.micro + 1 < micro_batches_) return {};
    for (size_t m = 0; m < values_.size(); ++m) {
      values_[m] = sums_[m] / static_cast<double>(micro_batches_);
      sums_[m] = 0.0;
    }
    for (size_t i = 0; i < rank_values_.size(); ++i) {
      rank_values_[i] = rank_sums_[i] / static_cast<double>(micro_batches_);
      rank_sums_[i] = 0.0;
    }
  }
  // A NaN or infinite loss means training has diverged: every later step
  // would be meaningless, so the job stops here, naming the step.
  if (loss_metric_ >= 0 && !std::isfinite(values_[loss_metric_]))
    return invalid_argument("the loss is {} at step {}; training diverged or read a non-finite value (lower "
                            "optimizer.lr, or check the data)", values_[loss_metric_], io.step);
  if (listener_) {
    const auto fetched = io.inputs.size() > reported ? io.inputs.subspan(reported) : decltype(io.inputs){};
    listener_(StepMetrics{io.step, names_, values_, fetch_, fetched, ranks_, rank_values_});
  }
  return {};
}

}  // namespace rill
