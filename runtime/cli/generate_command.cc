// `rill generate JOB --checkpoint PATH`: text from a trained language
// model of bytes or of GPT-2's byte-pair tokens saved in a checkpoint, without training again: the job's
// forward run eagerly on the host (runtime/eager/generate.h) with the
// checkpoint's variables, sampled as the job's `generate` section says,
// each field overridable by a flag. The same bytes a run of the job prints
// at its end, for the same variables and settings.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <cstdio>

#include <fmt/format.h>

#include "base/printable.h"
#include "graph/job_file.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/eager/generate.h"

namespace rill {
namespace {

struct GenerateArgs {
  std::string job_path;
  std::vector<std::string> overrides;  // --set, as rill run takes them
  std::string checkpoint;              // a step directory, or a root whose latest step is read
  std::optional<std::string> prompt;
  std::optional<int64_t> tokens, top_k, seed;
  std::optional<double> temperature;
};

StatusOr<std::string> generate(const GenerateArgs& args) {
  RILL_ASSIGN_OR_RETURN(graph::Job job, graph::load_job_file(args.job_path, args.overrides));
  if (!job.generate)
    return invalid_argument("job '{}' ({}) has no generate section: rill generate samples what its `generate.logits` "
                            "says, fed through `generate.input`",
                            job.name, args.job_path);
  graph::Generate config = *job.generate;
  if (args.prompt) config.prompt = *args.prompt;
  if (args.tokens) config.tokens = *args.tokens;
  if (args.temperature) config.temperature = *args.temperature;
  if (args.top_k) config.top_k = *args.top_k;
  if (args.seed) config.seed = *args.seed;
  if (config.tokens < 1 || config.tokens > 1000000)
    return invalid_argument("--tokens {}: expected 1 to 1000000", config.tokens);
  if (!(config.temperature >= 0)) return invalid_argument("--temperature {}: expected >= 0", config.temperature);
  if (config.top_k < 0) return invalid_argument("--top-k {}: expected >= 0", config.top_k);
  RILL_ASSIGN_OR_RETURN(const Checkpoint checkpoint, read_checkpoint(args.checkpoint));
  // The job's variables, whole, as the checkpoint holds them.
  eager::Tensors variables;
  for (const graph::Variable& v : job.variables) {
    const CheckpointTensor* held = nullptr;
    for (const CheckpointTensor& t : checkpoint.tensors)
      if (t.name == v.name) held = &t;
    if (held == nullptr)
      return invalid_argument("checkpoint {} (step {}, job '{}') has no variable '{}' of job '{}'", args.checkpoint,
                              checkpoint.step, checkpoint.job, v.name, job.name);
    if (!(held->shape == v.shape))
      return invalid_argument("checkpoint {}: variable '{}' has shape {}, job '{}' declares {}", args.checkpoint,
                              v.name, shape_string(held->shape), job.name, shape_string(v.shape));
    RILL_ASSIGN_OR_RETURN(variables[v.name],
                          eager::HostTensor::variable(v.name, TensorMeta{held->shape, v.dtype}, held->values));
  }
  RILL_ASSIGN_OR_RETURN(std::string text, eager::generate_text(job, variables, config));
  return fmt::format("generated ({} {} after the prompt) from step {} of {}:\n{}", config.tokens,
                     config.tokenizer == "gpt2" ? "GPT-2 tokens" : "bytes", checkpoint.step, args.checkpoint,
                     printable(text));
}

class GenerateCommand : public cli::Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("generate", "Sample text from a trained language model (bytes or GPT-2 tokens) in a checkpoint");
    app_->add_option("job", args_.job_path, "Job description file (JSON) with a generate section")->required();
    app_->add_option("--checkpoint", args_.checkpoint, "A checkpoint's step directory, or its root (the latest step)")
        ->required();
    app_->add_option("--set", args_.overrides, "Override a job field, as rill run takes it");
    app_->add_option("--prompt", args_.prompt, "The text to go on from (default: the job's)");
    app_->add_option("--tokens", args_.tokens, "Tokens to sample: bytes, or GPT-2 tokens (default: the job's)");
    app_->add_option("--temperature", args_.temperature, "0: the most likely byte each time");
    app_->add_option("--top-k", args_.top_k, "Sample among the k most likely tokens (0: all)");
    app_->add_option("--seed", args_.seed, "The draws' seed");
  }
  int act() override {
    auto text = generate(args_);
    if (!text.ok()) return fail_command(text.status());
    std::printf("%s\n", text->c_str());
    return 0;
  }

 private:
  GenerateArgs args_;
};

}  // namespace

std::unique_ptr<cli::Command> cli::generate_command() { return std::make_unique<GenerateCommand>(); }

}  // namespace rill
