#include "runtime/eager/generate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "text/bpe.h"

namespace rill::eager {
namespace {

// The next token from one row of logits (the first `vocab` of them): the
// most likely at temperature 0, else a draw from softmax(logits /
// temperature) over the top_k (0: all).
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

StatusOr<std::string> generate_text(const graph::Job& job, const Tensors& variables, const graph::Generate& config,
                                    const FileAccess& access) {
  const graph::Input* input = nullptr;
  for (const graph::Input& in : job.inputs)
    if (in.name == config.input) input = &in;
  if (input == nullptr || input->dtype != DType::kI32 || input->shape.size() != 1)
    return invalid_argument("generate: input '{}' must be an i32 input of one axis (the context)", config.input);
  const int64_t context = input->shape[0];
  // The prompt as tokens: its bytes, or GPT-2's byte-pair ids.
  std::optional<text::BpeTokenizer> bpe;
  std::vector<int32_t> ids;
  int64_t vocab_tokens = 256;
  if (config.tokenizer == "gpt2") {
    auto loaded = text::BpeTokenizer::load(config.vocab, access);
    if (!loaded.ok()) return loaded.status().with_context("generate: GPT-2's vocabulary (generate.vocab)");
    bpe.emplace(std::move(*loaded));
    vocab_tokens = bpe->vocab_size();
    ids = config.prompt.empty() ? std::vector<int32_t>{} : bpe->encode(config.prompt);
    if (ids.empty()) {
      const int32_t eot = bpe->id_of("<|endoftext|>");
      if (eot < 0) return invalid_argument("generate: an empty prompt starts at <|endoftext|>, which {} lacks", config.vocab);
      ids.push_back(eot);
    }
  } else {
    const std::string prompt = config.prompt.empty() ? std::string("\n") : config.prompt;
    for (char c : prompt) ids.push_back(static_cast<unsigned char>(c));
  }
  const size_t prompt_tokens = ids.size();
  std::mt19937_64 rng(config.seed);
  Tensors given = variables;  // and the window, replaced each step
  Tensors made;               // the last forward's tensors: the next one writes into their buffers
  for (int64_t n = 0; n < config.tokens; ++n) {
    const size_t window = std::min<size_t>(ids.size(), static_cast<size_t>(context));
    HostTensor window_ids = HostTensor::of({{1, context}, DType::kI32});
    std::copy(ids.end() - static_cast<std::ptrdiff_t>(window), ids.end(), window_ids.i32());
    given[config.input] = std::move(window_ids);
    RILL_ASSIGN_OR_RETURN(made, run_forward(job, given, {config.logits}, &made));
    const auto it = made.find(config.logits);
    const HostTensor& logits = it != made.end() ? it->second : given.at(config.logits);
    const Shape& s = logits.meta.shape;
    if (logits.meta.dtype != DType::kF32 || s.size() != 3 || s[0] != 1 || s[1] != context || s[2] < 1)
      return invalid_argument("generate: logits '{}' are {}; expected f32 [1, {}, vocabulary] for one window",
                              config.logits, shape_string(s), context);
    // A vocabulary padded past its tokens (GPT-2's 50,257 to 50,304)
    // never samples the padding.
    if (s[2] < vocab_tokens || (!bpe && s[2] > vocab_tokens))
      return invalid_argument("generate: logits '{}' have {} classes; {} has {} tokens", config.logits, s[2],
                              bpe ? "GPT-2's vocabulary" : "text generation reads bytes, which", vocab_tokens);
    const float* row = logits.f32() + static_cast<int64_t>(window - 1) * s[2];
    ids.push_back(sample(row, vocab_tokens, config, &rng));
  }
  if (!bpe) return std::string(ids.begin(), ids.end());
  const std::span<const int32_t> written(ids.data() + prompt_tokens, ids.size() - prompt_tokens);
  RILL_ASSIGN_OR_RETURN(std::string text, bpe->decode(written));
  return config.prompt + text;
}

}  // namespace rill::eager
