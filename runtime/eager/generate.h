// Text from a trained language model of bytes or of GPT-2's byte-pair
// tokens: the job's forward, run eagerly on the host (eager.h) over a
// window of the last `context` tokens, samples the next token from the
// logits at the window's last position, again and again. The job's
// `generate` section says which input takes the tokens, which tensor holds
// the logits, the prompt, how to sample and what a token is.
#pragma once

#include <string>

#include "base/file_access.h"
#include "base/status.h"
#include "graph/job.h"
#include "runtime/eager/eager.h"

namespace rill::eager {

// The prompt followed by `config.tokens` sampled tokens' bytes. `variables`
// holds every variable the logits depend on, whole. GPT-2's vocabulary is
// read from config.vocab, each file checked against `access` as it is
// opened (an agent's data roots).
StatusOr<std::string> generate_text(const graph::Job& job, const Tensors& variables, const graph::Generate& config,
                                    const FileAccess& access = {});

}  // namespace rill::eager
