// Text from a trained byte-level language model: the job's forward, run
// eagerly on the host (eager.h) over a window of the last `context` bytes,
// samples the next byte from the logits at the window's last position, again
// and again. The job's `generate` section says which input takes the bytes,
// which tensor holds the logits, the prompt and how to sample.
#pragma once

#include <string>

#include "base/status.h"
#include "graph/job.h"
#include "runtime/eager/eager.h"

namespace rill::eager {

// The prompt followed by `config.tokens` sampled bytes. `variables` holds
// every variable the logits depend on, whole.
StatusOr<std::string> generate_text(const graph::Job& job, const Tensors& variables, const graph::Generate& config);

}  // namespace rill::eager
