// Eager evaluation of a job's forward on the host, and text generation from
// it: windows of the last `context` bytes, the next byte read at the
// window's last position, temperature 0 taking the most likely byte.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "graph/job_file.h"
#include "runtime/eager/generate.h"
#include "text/bpe.h"

namespace rill {
namespace {

// logits = embedding(idx, table) + b: with table row i = 10 one-hot(i + 1),
// the most likely byte after byte i is i + 1.
const char* kShiftJob = R"({
  "name": "shift",
  "datasets": [{"name": "t", "kind": "text", "path": "unused.txt", "context": 4}],
  "inputs": [
    {"name": "idx", "dataset": "t", "field": "tokens", "shape": [4], "dtype": "i32"},
    {"name": "targets", "dataset": "t", "field": "targets", "shape": [4], "dtype": "i32"}
  ],
  "variables": [{"name": "table", "shape": [256, 256]}, {"name": "b", "shape": [256]}],
  "ops": [
    {"name": "emb", "type": "embedding", "inputs": ["idx", "table"]},
    {"name": "logits", "type": "bias_add", "inputs": ["emb", "b"]},
    {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "targets"]},
    {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}
  ],
  "loss": "loss",
  "train": {"steps": 1, "batch_size": 1},
  "generate": {"input": "idx", "logits": "logits", "prompt": "a", "tokens": 6, "temperature": 0}
})";

eager::Tensors shift_variables() {
  std::vector<float> table(256 * 256, 0.0f), b(256, 0.0f);
  for (int i = 0; i < 255; ++i) table[i * 256 + i + 1] = 10.0f;
  eager::Tensors v;
  v["table"] = eager::HostTensor::floats({256, 256}, table);
  v["b"] = eager::HostTensor::floats({256}, b);
  return v;
}

TEST_CASE("the forward runs only what the wanted tensor needs, with the CPU kernels") {
  auto job = graph::parse_job_json(kShiftJob, "shift.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  eager::Tensors given = shift_variables();
  eager::HostTensor ids = eager::HostTensor::of({{1, 4}, DType::kI32});
  for (int k = 0; k < 4; ++k) ids.i32()[k] = 'w' + k;
  given["idx"] = std::move(ids);
  auto made = eager::run_forward(*job, given, {"logits"});
  REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  CHECK(made->count("loss") == 0);  // the targets were not given: the loss is not needed
  const eager::HostTensor& logits = made->at("logits");
  REQUIRE(logits.meta.shape == Shape{1, 4, 256});
  CHECK(logits.f32()[2 * 256 + 'y' + 1] == 10.0f);  // position 2 holds 'y'
  CHECK(logits.f32()[2 * 256 + 'y'] == 0.0f);
  // Asking for the loss without the targets names what is missing.
  auto missing = eager::run_forward(*job, given, {"loss"});
  CHECK(missing.status().message().find("'targets'") != std::string::npos);
}

// A loop of forwards (generation's) writes into the buffers the last one
// made, and gets what fresh buffers would give.
TEST_CASE("a forward reusing an earlier one's buffers gives the same tensors in the same memory") {
  auto job = graph::parse_job_json(kShiftJob, "shift.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  eager::Tensors given = shift_variables();
  auto window = [&](char first) {
    eager::HostTensor ids = eager::HostTensor::of({{1, 4}, DType::kI32});
    for (int k = 0; k < 4; ++k) ids.i32()[k] = first + k;
    given["idx"] = std::move(ids);
  };
  window('w');
  auto earlier = eager::run_forward(*job, given, {"logits"});
  REQUIRE(earlier.ok());
  const std::byte* memory = earlier->at("logits").bytes.data();
  window('a');
  auto fresh = eager::run_forward(*job, given, {"logits"});
  auto reused = eager::run_forward(*job, given, {"logits"}, &*earlier);
  REQUIRE(fresh.ok());
  REQUIRE(reused.ok());
  CHECK(earlier->empty());  // taken
  CHECK(reused->at("logits").bytes.data() == memory);
  CHECK(reused->at("logits").bytes == fresh->at("logits").bytes);
  CHECK(reused->at("logits").f32()[2 * 256 + 'c' + 1] == 10.0f);  // position 2 holds 'c'
  CHECK(reused->at("logits").f32()[2 * 256 + 'y' + 1] == 0.0f);   // not the earlier window's
}

TEST_CASE("a forward run is inference: dropout passes its input through") {
  // The shift job with a dropout of rate 0.9 between the lookup and the
  // bias: training would drop 9 in 10 of the logits' terms.
  std::string text = kShiftJob;
  const std::string lookup = R"({"name": "emb", "type": "embedding", "inputs": ["idx", "table"]},)";
  text.replace(text.find(lookup), lookup.size(),
               R"({"name": "emb0", "type": "embedding", "inputs": ["idx", "table"]},
                  {"name": "emb", "type": "dropout", "inputs": ["emb0"], "attrs": {"rate": 0.9}},)");
  auto job = graph::parse_job_json(text, "shift_dropout.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  auto made = eager::generate_text(*job, shift_variables(), *job->generate);
  REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  CHECK(*made == "abcdefg");
}

TEST_CASE("generation reads each next byte at the window's last position, sliding past the context") {
  auto job = graph::parse_job_json(kShiftJob, "shift.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  auto text = eager::generate_text(*job, shift_variables(), *job->generate);
  REQUIRE_MESSAGE(text.ok(), text.status().to_string());
  CHECK(*text == "abcdefg");  // 6 bytes after the prompt; the window of 4 slides from the fifth
  // Sampling draws from softmax(logits / temperature) over the top_k bytes:
  // top_k 1 is the most likely byte whatever the temperature; at a
  // temperature of 1000 the logits 10 apart are nearly even over 256 bytes,
  // so 6 draws all following the shift would be a 1 in 10^14 chance; the
  // draws are the seed's.
  graph::Generate top1 = *job->generate;
  top1.temperature = 1000.0;
  top1.top_k = 1;
  auto greedy = eager::generate_text(*job, shift_variables(), top1);
  REQUIRE(greedy.ok());
  CHECK(*greedy == "abcdefg");
  graph::Generate hot = top1;
  hot.top_k = 0;
  auto first = eager::generate_text(*job, shift_variables(), hot), second = eager::generate_text(*job, shift_variables(), hot);
  REQUIRE(first.ok());
  CHECK(first->size() == 7);
  CHECK(*first != "abcdefg");
  CHECK(*first == *second);
  hot.seed = 2;
  CHECK(*eager::generate_text(*job, shift_variables(), hot) != *first);
}

// Checkpoints and run results hold an i32 variable's ints as the bits of
// floats; generation (at a run's end and by `rill generate`) reads them back
// as those ints, not as the floats' values.
TEST_CASE("a variable's values become the eager tensor of its dtype: f32 values, i32 ints from their bits") {
  std::vector<float> words(3);
  const int32_t ints[3] = {7, -1, 1 << 20};
  std::memcpy(words.data(), ints, sizeof ints);
  auto i32 = eager::HostTensor::variable("ids", {{3}, DType::kI32}, words);
  REQUIRE_MESSAGE(i32.ok(), i32.status().to_string());
  CHECK(i32->i32()[0] == 7);
  CHECK(i32->i32()[1] == -1);
  CHECK(i32->i32()[2] == 1 << 20);
  auto f32 = eager::HostTensor::variable("w", {{2}, DType::kF32}, {1.5f, -2.0f});
  REQUIRE(f32.ok());
  CHECK(f32->f32()[1] == -2.0f);
  auto half = eager::HostTensor::variable("h", {{2}, DType::kBF16}, {1.0f, 2.0f});
  CHECK(half.status().message().find("variable 'h': a variable is f32 or i32, not bf16") != std::string::npos);
  auto short_of = eager::HostTensor::variable("w", {{3}, DType::kF32}, {1.0f});
  CHECK(short_of.status().message().find("variable 'w': 1 values for a tensor of shape [3]") != std::string::npos);
}

TEST_CASE("generation refuses logits that are not bytes, and a job file's section is checked") {
  auto job = graph::parse_job_json(kShiftJob, "shift.json");
  REQUIRE(job.ok());
  graph::Generate bad = *job->generate;
  bad.logits = "idx";
  auto text = eager::generate_text(*job, shift_variables(), bad);
  CHECK(text.status().message().find("logits 'idx' are [1, 4]") != std::string::npos);
  std::string wrong = kShiftJob;
  wrong.replace(wrong.find(R"("logits": "logits", "prompt")"), 18, R"("logits": "logit")");
  auto checked = graph::parse_job_json(wrong, "shift.json");
  REQUIRE_FALSE(checked.ok());
  CHECK(checked.status().message().find("generate: no op makes 'logit'") != std::string::npos);
}

// A model of byte-pair tokens: a vocabulary of the 256 bytes and an end of
// text (id 256), no merges, with logits padded to 260 classes. Each byte
// i is followed by i + 1 (10 at its column); the end of text by 'x'; the
// padding's columns hold 20 in every row, so greedy sampling would take
// them if it could.
TEST_CASE("generation of GPT-2 tokens encodes the prompt, never samples the padding and decodes what it drew") {
  const auto dir = std::filesystem::temp_directory_path() / ("rill-vocab-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  nlohmann::json encoder = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) encoder[text::byte_symbol(static_cast<uint8_t>(b))] = b;
  encoder["<|endoftext|>"] = 256;
  std::ofstream(dir / "encoder.json") << encoder.dump();
  std::ofstream(dir / "vocab.bpe") << "#version: 0.2\n";
  std::string job_text = kShiftJob;
  auto edit = [&](const std::string& from, const std::string& to) {
    const size_t at = job_text.find(from);
    REQUIRE(at != std::string::npos);
    job_text.replace(at, from.size(), to);
  };
  edit(R"("kind": "text", "path": "unused.txt")", R"("kind": "tokens", "path": "unused.bin")");
  edit("[256, 256]", "[260, 260]");
  edit(R"("shape": [256]})", R"("shape": [260]})");
  edit(R"("prompt": "a")", R"("tokenizer": "gpt2", "vocab": ")" + dir.string() + R"(", "prompt": "a")");
  auto job = graph::parse_job_json(job_text, "bpe.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  std::vector<float> table(260 * 260, 0.0f), b(260, 0.0f);
  for (int i = 0; i < 260; ++i) {
    if (i < 255) table[i * 260 + i + 1] = 10.0f;
    for (int pad = 257; pad < 260; ++pad) table[i * 260 + pad] = 20.0f;
  }
  table[256 * 260 + 'x'] = 10.0f;
  eager::Tensors v;
  v["table"] = eager::HostTensor::floats({260, 260}, table);
  v["b"] = eager::HostTensor::floats({260}, b);
  auto text = eager::generate_text(*job, v, *job->generate);
  REQUIRE_MESSAGE(text.ok(), text.status().to_string());
  CHECK(*text == "abcdefg");
  graph::Generate empty = *job->generate;
  empty.prompt = "";  // starts at the end of text
  auto from_eot = eager::generate_text(*job, v, empty);
  REQUIRE(from_eot.ok());
  CHECK(*from_eot == "xyz{|}");
  // Logits narrower than the vocabulary are refused, naming both.
  graph::Generate narrow = *job->generate;
  narrow.vocab = dir.string();
  std::ofstream(dir / "encoder.json") << [&] {
    encoder["<|extra|>"] = 257;
    encoder["<|more|>"] = 258;
    encoder["<|most|>"] = 259;
    encoder["<|past|>"] = 260;
    return encoder.dump();
  }();
  auto too_few = eager::generate_text(*job, v, narrow);
  REQUIRE_FALSE(too_few.ok());
  CHECK(too_few.status().message().find("have 260 classes; GPT-2's vocabulary has 261 tokens") != std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rill
