// `rill tokenize` as a user runs it: text files into one llm.c token file
// (an end-of-text token before each), back into text with --decode, and a
// clear error where the vocabulary or an input is missing.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "process_util.h"

namespace {

using rill::testing::Ran;
using rill::testing::root;
using rill::testing::run_rill;

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("rill tokenize: two documents into one token file and back, each after an end-of-text token") {
  const std::string vocab = root() + "/data/gpt2";
  if (!std::filesystem::exists(vocab + "/encoder.json")) {
    MESSAGE("skipped: no GPT-2 vocabulary in " << vocab << " (./dev fetches it)");
    return;
  }
  const auto dir = rill::testing::temp_dir("rill-tokenize-") / "round-trip";
  std::filesystem::create_directories(dir);
  const std::string first = "Call me Ishmael. Some years ago\xE2\x80\x94never mind how long precisely.\n";
  const std::string second = "It's 1851, and the Pequod\xE2\x80\x99s crew is   ready \xF0\x9F\x90\x8B\n\n";
  std::ofstream(dir / "a.txt", std::ios::binary) << first;
  std::ofstream(dir / "b.txt", std::ios::binary) << second;
  Ran ran = run_rill("tokenize --vocab " + vocab + " " + (dir / "a.txt").string() + " " + (dir / "b.txt").string() +
                     " -o " + (dir / "t.bin").string());
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  CHECK(ran.output.find("tokens of " + std::to_string(first.size() + second.size()) + " bytes from 2 file(s)") !=
        std::string::npos);
  // llm.c's header: the magic, version 1 (uint16 ids), the count.
  const std::string bin = read_bytes(dir / "t.bin");
  REQUIRE(bin.size() > 1024);
  int32_t header[3];
  std::memcpy(header, bin.data(), sizeof header);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(static_cast<size_t>(header[2]) * 2 + 1024 == bin.size());
  uint16_t eot;
  std::memcpy(&eot, bin.data() + 1024, 2);
  CHECK(eot == 50256);
  Ran back = run_rill("tokenize --decode --vocab " + vocab + " " + (dir / "t.bin").string() + " -o " +
                      (dir / "back.txt").string());
  INFO(back.output);
  REQUIRE(back.code == 0);
  CHECK(read_bytes(dir / "back.txt") == "<|endoftext|>" + first + "<|endoftext|>" + second);
  // To stdout too.
  Ran out = run_rill("tokenize --decode --vocab " + vocab + " " + (dir / "t.bin").string());
  CHECK(out.output == "<|endoftext|>" + first + "<|endoftext|>" + second);
}

TEST_CASE("rill tokenize names what is missing: the vocabulary, an input, the output") {
  const auto dir = rill::testing::temp_dir("rill-tokenize-") / "errors";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.txt") << "text";
  Ran no_vocab = run_rill("tokenize --vocab " + (dir / "none").string() + " " + (dir / "a.txt").string() + " -o " +
                          (dir / "t.bin").string());
  CHECK(no_vocab.code != 0);
  CHECK(no_vocab.output.find("GPT-2's vocabulary (" + (dir / "none").string() + "/encoder.json") != std::string::npos);
  CHECK(no_vocab.output.find("./dev fetches them") != std::string::npos);
  const std::string vocab = root() + "/data/gpt2";
  if (!std::filesystem::exists(vocab + "/encoder.json")) return;
  Ran no_input = run_rill("tokenize --vocab " + vocab + " " + (dir / "nothing.txt").string() + " -o " +
                          (dir / "t.bin").string());
  CHECK(no_input.code != 0);
  const std::string nothing = (dir / "nothing.txt").string();
  CHECK(no_input.output.find(nothing + "': cannot open") != std::string::npos);
  Ran no_output = run_rill("tokenize --vocab " + vocab + " " + (dir / "a.txt").string());
  CHECK(no_output.code != 0);
  CHECK(no_output.output.find("give -o TOKENS.bin") != std::string::npos);
  Ran not_tokens = run_rill("tokenize --decode --vocab " + vocab + " " + (dir / "a.txt").string());
  CHECK(not_tokens.code != 0);
  CHECK(not_tokens.output.find("shorter than the 1024-byte header") != std::string::npos);
  // A folder where a file belongs: an error, not a crash.
  Ran folder = run_rill("tokenize --vocab " + vocab + " " + dir.string() + " -o " + (dir / "t.bin").string());
  CHECK(folder.code == 1);
  CHECK(folder.output.find(dir.string()) != std::string::npos);
  Ran decode_folder = run_rill("tokenize --decode --vocab " + vocab + " " + dir.string());
  CHECK(decode_folder.code == 1);
  CHECK_FALSE(std::filesystem::exists(dir / "t.bin"));
}

// The BPE sample (samples/gpt2/gpt2_moby_bpe.json) on Moby-Dick as GPT-2
// tokens, 30 steps: its first loss is that of a model that finds every
// token alike, ln 50,304 (wte's padded rows included) = 10.826, within 0.1
// (logits start at about 0.02 x sqrt(128) = 0.23 apart, which adds about
// 0.03); then it learns.
TEST_CASE("the GPT-2 BPE sample trains on rill tokenize's file") {
  const std::string vocab = root() + "/data/gpt2", moby = root() + "/data/moby-dick.txt";
  if (!std::filesystem::exists(vocab + "/encoder.json") || !std::filesystem::exists(moby)) {
    MESSAGE("skipped: no GPT-2 vocabulary or Moby-Dick in " << root() << "/data (./dev fetches them)");
    return;
  }
  const auto dir = rill::testing::temp_dir("rill-tokenize-") / "sample";
  std::filesystem::create_directories(dir);
  const std::string tokens = (dir / "moby-gpt2.bin").string();
  Ran made = run_rill("tokenize --vocab " + vocab + " " + moby + " -o " + tokens);
  REQUIRE_MESSAGE(made.code == 0, made.output);
  const std::string result = (dir / "r.json").string();
  const std::string job = root() + "/samples/gpt2/gpt2_moby_bpe.json --set datasets.train.path=" + tokens +
                          " --set datasets.val.path=" + tokens + " --set generate.vocab=" + vocab;
  Ran ran = run_rill("run " + job + " --steps 30 --set train.log_every=10 --set checkpoint.dir=" +
                     (dir / "ckpt").string() + " --result " + result);
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  std::ifstream in(result);
  const auto j = nlohmann::json::parse(in);
  const auto& losses = j["loss_curve"];
  REQUIRE(losses.size() == 30);
  CHECK(std::abs(losses[0].get<double>() - std::log(50304.0)) < 0.1);
  CHECK(losses[29].get<double>() < losses[0].get<double>() - 1.0);
  // Then 60 GPT-2 tokens sampled after the prompt, decoded; `rill generate`
  // from the checkpoint writes the same text.
  const std::string generated = j["generated"].get<std::string>();
  CHECK(generated.rfind("Call me Ishmael.", 0) == 0);
  CHECK(generated.size() > std::string("Call me Ishmael.").size() + 60);  // most tokens are more than a byte
  const std::string header = "generated (60 GPT-2 tokens after the prompt):\n";
  REQUIRE(ran.output.find(header) != std::string::npos);
  const std::string printed = ran.output.substr(ran.output.find(header) + header.size(), 200);
  Ran again = run_rill("generate " + job + " --checkpoint " + (dir / "ckpt").string());
  INFO(again.output);
  REQUIRE(again.code == 0);
  CHECK(again.output.find("generated (60 GPT-2 tokens after the prompt) from step 30") != std::string::npos);
  CHECK(again.output.find(printed.substr(0, printed.find("\ndone"))) != std::string::npos);
}

// generate.tokenizer gpt2 reads its vocabulary before the training: a
// folder without it fails the run at its start, naming the field.
TEST_CASE("a BPE job whose vocabulary is not there fails before it trains") {
  Ran ran = run_rill("run " + root() + "/samples/gpt2/gpt2_moby_bpe.json --set generate.vocab=/nonexistent/gpt2");
  CHECK(ran.code != 0);
  CHECK(ran.output.find("generate.vocab") != std::string::npos);
  CHECK(ran.output.find("/nonexistent/gpt2/encoder.json") != std::string::npos);
  CHECK(ran.output.find("step ") == std::string::npos);
}
