// `rill convert`: GPT-2 checkpoints between Hugging Face's layout and Rill's
// (runtime/checkpoint/hf_gpt2.h), for a job with GPT-2's architecture:
//   rill convert --from hf-gpt2 DIR_OR_FILE --job JOB -o CKPT   a Rill checkpoint of step 0
//   rill convert --to hf-gpt2 CKPT --job JOB -o DIR             model.safetensors and config.json
#include <string>
#include <vector>

#include <fmt/format.h>

#include "graph/job_file.h"
#include "runtime/checkpoint/hf_gpt2.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"

namespace rill::cli {
namespace {

class ConvertCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("convert", "Convert GPT-2 checkpoints between Hugging Face's layout and Rill's");
    app_->add_option("input", input_, "Hugging Face's model folder or .safetensors file (--from), or a Rill "
                                      "checkpoint: a step folder or a root (--to)")
        ->required();
    app_->add_option("--from", from_, "Read this format: hf-gpt2")->check(CLI::IsMember({"hf-gpt2"}));
    app_->add_option("--to", to_, "Write this format: hf-gpt2")->check(CLI::IsMember({"hf-gpt2"}));
    app_->add_option("--job", job_, "The job file whose variables the checkpoint holds (GPT-2's architecture)")
        ->required();
    app_->add_option("--set", overrides_, "Override a job field, KEY=VALUE (as rill run)");
    app_->add_option("-o,--output", output_, "The Rill checkpoint root (--from) or Hugging Face folder (--to)")
        ->required();
    app_->add_option("--vocab", vocab_, "--to: the vocabulary's rows kept of wte (a padded 50,304: 50257; "
                                        "default: all)");
  }

  int act() override {
    if (from_.empty() == to_.empty())
      return fail_command(invalid_argument("convert: give one of --from hf-gpt2 or --to hf-gpt2"));
    auto job = graph::load_job_file(job_, overrides_);
    if (!job.ok()) return fail_command(job.status());
    std::string said;
    Status done = !from_.empty() ? import_hf_gpt2(input_, *job, output_, &said)
                                 : export_hf_gpt2(input_, *job, output_, vocab_, &said);
    if (!done.ok()) return fail_command(done);
    fmt::print("{}\n", said);
    return 0;
  }

 private:
  std::string input_, from_, to_, job_, output_;
  std::vector<std::string> overrides_;
  int64_t vocab_ = 0;
};

}  // namespace

std::unique_ptr<Command> convert_command() { return std::make_unique<ConvertCommand>(); }

}  // namespace rill::cli
