#include "runtime/eager/generate.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace rill::eager {
namespace {

// The next byte from one row of logits: the most likely at temperature 0,
// else a draw from softmax(logits / temperature) over the top_k (0: all).
int32_t sample(const float* logits, int64_t vocab, const graph::Generate& config, std::mt19937_64* rng) {
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (config.temperature <= 0) return order[0];
  const size_t keep = config.top_k > 0 ? std::min<size_t>(static_cast<size_t>(config.top_k), order.size()) : order.size();
  std::vector<double> weights(keep);
  const double top = logits[order[0]];
  for (size_t k = 0; k < keep; ++k) weights[k] = std::exp((logits[order[k]] - top) / config.temperature);
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  return order[pick(*rng)];
}

}  // namespace

StatusOr<std::string> generate_text(const graph::Job& job, const Tensors& variables, const graph::Generate& config) {
  const graph::Input* input = nullptr;
  for (const graph::Input& in : job.inputs)
    if (in.name == config.input) input = &in;
  if (input == nullptr || input->dtype != DType::kI32 || input->shape.size() != 1)
    return invalid_argument("generate: input '{}' must be an i32 input of one axis (the context)", config.input);
  const int64_t context = input->shape[0];
  std::string text = config.prompt.empty() ? std::string("\n") : config.prompt;
  std::mt19937_64 rng(config.seed);
  Tensors given = variables;  // and the window, replaced each step
  Tensors made;               // the last forward's tensors: the next one writes into their buffers
  for (int64_t n = 0; n < config.tokens; ++n) {
    const size_t window = std::min<size_t>(text.size(), static_cast<size_t>(context));
    HostTensor ids = HostTensor::of({{1, context}, DType::kI32});
    for (size_t k = 0; k < window; ++k)
      ids.i32()[k] = static_cast<unsigned char>(text[text.size() - window + k]);
    given[config.input] = std::move(ids);
    RILL_ASSIGN_OR_RETURN(made, run_forward(job, given, {config.logits}, &made));
    const auto it = made.find(config.logits);
    const HostTensor& logits = it != made.end() ? it->second : given.at(config.logits);
    const Shape& s = logits.meta.shape;
    if (logits.meta.dtype != DType::kF32 || s.size() != 3 || s[0] != 1 || s[1] != context || s[2] < 1)
      return invalid_argument("generate: logits '{}' are {}; expected f32 [1, {}, vocabulary] for one window",
                              config.logits, shape_string(s), context);
    const int64_t vocab = s[2];
    if (vocab > 256)
      return invalid_argument("generate: logits '{}' have {} classes; text generation reads bytes (256)",
                              config.logits, vocab);
    const float* row = logits.f32() + static_cast<int64_t>(window - 1) * vocab;
    text.push_back(static_cast<char>(sample(row, vocab, config, &rng)));
  }
  return text;
}

}  // namespace rill::eager
