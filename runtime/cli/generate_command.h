// `rill generate JOB --checkpoint PATH`: text from a trained byte-level
// language model saved in a checkpoint, without training again: the job's
// forward run eagerly on the host (runtime/eager/generate.h) with the
// checkpoint's variables, sampled as the job's `generate` section says,
// each field overridable by a flag. The same bytes a run of the job prints
// at its end, for the same variables and settings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rill {

struct GenerateArgs {
  std::string job_path;
  std::vector<std::string> overrides;  // --set, as rill run takes them
  std::string checkpoint;              // a step directory, or a root whose latest step is read
  std::optional<std::string> prompt;
  std::optional<int64_t> tokens, top_k, seed;
  std::optional<double> temperature;
};

// Prints the text (control bytes and non-UTF-8 escaped); the exit code.
int generate_command(const GenerateArgs& args);

}  // namespace rill
