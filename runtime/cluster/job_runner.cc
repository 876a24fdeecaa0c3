#include "runtime/cluster/job_runner.h"

#include <utility>

#include "compiler/compiler.h"
#include "runtime/cluster/job_phases.h"
#include "text/bpe.h"

namespace rill {

// Prepare (the cluster and devices, node 0's training plan compiled and
// verified), describe, train, finish: job_phases.h.
JobResult run_job(const graph::Job& job, const JobRunOptions& options) {
  // The vocabulary generation decodes with, read now: a folder that is not
  // there is an error before the training, not after it.
  if (job.generate && job.generate->tokenizer == "gpt2") {
    auto vocab = text::BpeTokenizer::load(job.generate->vocab, options.data_access);
    if (!vocab.ok()) return JobResult{.status = vocab.status().with_context("generate.vocab")};
    constexpr int32_t kGpt2Tokens = 50257;  // the logits' classes are checked against it (compiler/validate.cc)
    if (vocab->vocab_size() != kGpt2Tokens)
      return JobResult{.status = invalid_argument("generate.vocab: {} holds {} tokens; GPT-2's vocabulary has {}",
                                                  job.generate->vocab, vocab->vocab_size(), kGpt2Tokens)};
  }
  auto cluster =
      compiler::parse_devices(options.devices.empty() ? job.train.devices : options.devices, options.num_nodes);
  if (!cluster.ok()) return JobResult{.status = cluster.status()};
  JobRun run{job, options, std::move(*cluster), options.devices.empty() ? job.train.devices : options.devices,
             options.executor ? options.executor
                              : [](const PhasePlan& phase, const RunOptions& run) { return run_plan(phase.plan, run); },
             {}};
  // Node 0's plan here; every other node compiles its own (PhasePlan).
  compiler::CompileOptions train_options;
  train_options.steps = options.steps;
  train_options.data_access = options.data_access;
  if (options.num_nodes > 1) train_options.node = 0;
  auto train_plan = compiler::compile(job, run.cluster, train_options);
  if (!train_plan.ok()) return JobResult{.status = train_plan.status()};
  auto verified = compiler::verify_plan(*train_plan);
  if (!verified.ok()) return JobResult{.status = verified.status()};
  JobResult& result = run.result;
  result.steps = result.planned_steps = (*verified)->steps();
  result.global_batch = (*verified)->global_batch();
  if (options.on_plan) options.on_plan(result.steps, result.global_batch);
  describe_run(run, **verified);
  const int64_t log_every = (*verified)->log_every();
  PhasePlan phase{std::move(*train_plan), run.devices, train_options, {}};
  phase.compile.steps = result.steps;
  if (Status trained = train(run, std::move(phase), log_every); !trained.ok()) {
    result.status = trained;
    return std::move(result);
  }
  for (Status (*next)(JobRun&) : {evaluate, generate})
    if (Status done = next(run); !done.ok()) {
      result.status = done;
      return std::move(result);
    }
  report(run);
  return std::move(result);
}

}  // namespace rill
