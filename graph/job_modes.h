// The job's modes: words in a job file ("1f1b", "mirrored", "pserver"),
// enums everywhere after parsing, so a mode is compared, switched on and
// checked once, where the file is read (graph/job_convert.cc) or a `--set`
// applies (graph/job_override.cc), and a new one fails to compile until
// every switch over it handles it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace rill::graph {

// train.schedule: how micro-batches flow through pipeline stages.
enum class Schedule : uint8_t { k1f1b, kGpipe };
// train.view: the job written for the whole cluster, or per device (DDP).
enum class View : uint8_t { kConsistent, kMirrored };
// train.precision: what matmuls multiply in. kBF16 and kF16 are automatic
// mixed precision (compiler/autocast.h): variables, optimizer state and
// every other op stay f32; kTF32 lets cuda matmuls round f32 inputs to TF32.
enum class Precision : uint8_t { kF32, kTF32, kBF16, kF16 };
// train.compression: how gradients cross nodes in data parallelism: as they
// are, rounded to bf16, or as PowerSGD's low-rank factors; the error
// carried into the next step either way (error feedback;
// actor/gradient_compression.h, actor/powersgd.h).
enum class Compression : uint8_t { kNone, kBF16, kPowerSGD };
// Where checkpoints keep a compressed all-reduce's carried state
// (runtime/node/carried_state.h): tensors named under this prefix, which no
// variable's name may start with.
inline constexpr std::string_view kCarriedStatePrefix = "compression/";
// distributed.mode (PaddlePaddle Fluid's): "nccl2" is "collective" by
// another name, kept apart only so a job is written back as it was read.
enum class DistMode : uint8_t { kPserver, kCollective, kNccl2 };
// distributed.split_method: which pserver holds a block.
enum class SplitMethod : uint8_t { kRoundRobin, kHashName };

// Each mode's words, in the order the enum lists them.
template <typename E>
struct ModeWords;
template <>
struct ModeWords<Schedule> {
  static constexpr std::array<std::string_view, 2> words{"1f1b", "gpipe"};
};
template <>
struct ModeWords<View> {
  static constexpr std::array<std::string_view, 2> words{"consistent", "mirrored"};
};
template <>
struct ModeWords<Precision> {
  static constexpr std::array<std::string_view, 4> words{"f32", "tf32", "bf16", "f16"};
};
template <>
struct ModeWords<Compression> {
  static constexpr std::array<std::string_view, 3> words{"none", "bf16", "powersgd"};
};
template <>
struct ModeWords<DistMode> {
  static constexpr std::array<std::string_view, 3> words{"pserver", "collective", "nccl2"};
};
template <>
struct ModeWords<SplitMethod> {
  static constexpr std::array<std::string_view, 2> words{"RoundRobin", "HashName"};
};

template <typename E>
std::string_view to_string(E mode) {
  return ModeWords<E>::words[static_cast<size_t>(mode)];
}

// The mode `text` names; false when it names none.
template <typename E>
bool parse_mode(std::string_view text, E* out) {
  const auto& words = ModeWords<E>::words;
  for (size_t i = 0; i < words.size(); ++i)
    if (words[i] == text) {
      *out = static_cast<E>(i);
      return true;
    }
  return false;
}

// The words, for an error: "\"1f1b\" or \"gpipe\"".
template <typename E>
std::string mode_choices() {
  const auto& words = ModeWords<E>::words;
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += '"';
    out += words[i];
    out += '"';
  }
  return out;
}

}  // namespace rill::graph
