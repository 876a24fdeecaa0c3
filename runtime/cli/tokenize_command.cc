// `rill tokenize`: text into llm.c's token files (what a "tokens" dataset
// reads) with GPT-2's byte-pair encoding (text/bpe.h), and a token file
// back into its text (--decode). Each input file is a document, and starts
// with GPT-2's end-of-text token, as llm.c's data scripts write them.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/data/file_bytes.h"
#include "kernels/data/token_file.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "text/bpe.h"

namespace rill::cli {
namespace {

StatusOr<std::string> read_all(const std::string& path) {
  auto bytes = read_file_bytes(path);
  if (!bytes.ok()) return bytes.status();
  return std::string(bytes->begin(), bytes->end());
}

class TokenizeCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("tokenize",
                               "Write text as an llm.c token file with GPT-2's byte-pair encoding (or, with --decode, "
                               "a token file as text)");
    app_->add_option("inputs", inputs_, "Text files (each a document, after an end-of-text token); with --decode, one "
                                        "token file")
        ->required();
    app_->add_option("-o,--output", output_, "The token file to write (with --decode: the text, by default to stdout)");
    app_->add_option("--bpe", bpe_, "The encoding: gpt2")->capture_default_str()->check(CLI::IsMember({"gpt2"}));
    app_->add_option("--vocab", vocab_, "The folder of GPT-2's encoder.json and vocab.bpe (./dev fetches them)")
        ->capture_default_str();
    app_->add_flag("--no-eot", no_eot_, "No end-of-text token before each document");
    app_->add_flag("--decode", decode_, "Write a token file's text instead");
  }

  int act() override {
    auto bpe = text::BpeTokenizer::load(vocab_);
    if (!bpe.ok())
      return fail_command(bpe.status().with_context(fmt::format(
          "GPT-2's vocabulary ({}/encoder.json and vocab.bpe: ./dev fetches them, or give --vocab DIR)", vocab_)));
    return decode_ ? decode(*bpe) : encode(*bpe);
  }

 private:
  int encode(const text::BpeTokenizer& bpe) {
    if (output_.empty()) return fail_command(invalid_argument("tokenize: give -o TOKENS.bin, the token file to write"));
    const int32_t eot = bpe.id_of("<|endoftext|>");
    if (!no_eot_ && eot < 0)
      return fail_command(invalid_argument("{}/encoder.json has no <|endoftext|>: give --no-eot", vocab_));
    std::vector<int32_t> ids;
    size_t bytes = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& path : inputs_) {
      auto text = read_all(path);
      if (!text.ok()) return fail_command(text.status());
      if (!no_eot_) ids.push_back(eot);
      std::vector<int32_t> more = bpe.encode(*text);
      ids.insert(ids.end(), more.begin(), more.end());
      bytes += text->size();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (Status written = write_token_file(output_, ids); !written.ok()) return fail_command(written);
    fmt::print("{}: {} tokens of {} bytes from {} file(s) ({:.2f} bytes a token), GPT-2 BPE, {:.0f} tokens/s\n", output_,
               ids.size(), bytes, inputs_.size(), ids.empty() ? 0.0 : static_cast<double>(bytes) / ids.size(),
               seconds > 0 ? ids.size() / seconds : 0.0);
    return 0;
  }

  int decode(const text::BpeTokenizer& bpe) {
    if (inputs_.size() != 1) return fail_command(invalid_argument("tokenize --decode: give one token file"));
    auto ids = read_token_file(inputs_[0]);
    if (!ids.ok()) return fail_command(ids.status());
    auto text = bpe.decode(*ids);
    if (!text.ok()) return fail_command(text.status().with_context(inputs_[0]));
    if (output_.empty()) {
      std::fwrite(text->data(), 1, text->size(), stdout);
      return 0;
    }
    std::ofstream out(output_, std::ios::binary | std::ios::trunc);
    out.write(text->data(), static_cast<std::streamsize>(text->size()));
    out.close();
    if (!out) return fail_command(Status(Code::kUnavailable, fmt::format("cannot write '{}'", output_)));
    return 0;
  }

  std::vector<std::string> inputs_;
  std::string output_, bpe_ = "gpt2", vocab_ = "data/gpt2";
  bool no_eot_ = false, decode_ = false;
};

}  // namespace

std::unique_ptr<Command> tokenize_command() { return std::make_unique<TokenizeCommand>(); }

}  // namespace rill::cli
