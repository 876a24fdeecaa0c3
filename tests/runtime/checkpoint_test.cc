// The checkpoint store: round trips, atomic replacement, `latest`, pruning,
// validation of corrupt files (hand-made and fuzzed) and a numpy-only reader.
#include <doctest/doctest.h>

#include <bit>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "base/half.h"
#include "runtime/checkpoint/checkpoint.h"

namespace rill {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it when the test ends.
struct TempDir {
  TempDir() {
    static int counter = 0;
    path = (fs::temp_directory_path() / ("rill-checkpoint-test-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(counter++))).string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

Checkpoint sample_checkpoint(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.job = "mlp";
  c.tensors = {
      {"w1", {2, 3}, {1.5f, -0.0f, 1e-30f, 3.4e38f, -7.25f, static_cast<float>(step)}},
      {"w1/momentum", {2, 3}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}},
      {"b1", {}, {42.0f}},                      // a scalar
      {"empty", {0, 4}, {}},                    // no elements
      {"layer2/w", {3}, {-1.0f, 2.0f, -3.0f}},  // a slash, but no variable "layer2"
      {"layer2/w/adam_m", {3}, {1e-3f, 2e-3f, 3e-3f}},
      {"layer2/w/adam_v", {3}, {1e-6f, 2e-6f, 3e-6f}},
  };
  c.metadata = {{"optimizer", "adam"}, {"learning_rate", "0.001"}};
  return c;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void check_equal(const Checkpoint& got, const Checkpoint& want) {
  CHECK(got.step == want.step);
  CHECK(got.job == want.job);
  CHECK(got.metadata == want.metadata);
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    CAPTURE(want.tensors[i].name);
    CHECK(got.tensors[i].name == want.tensors[i].name);
    CHECK(got.tensors[i].shape == want.tensors[i].shape);
    CHECK(same_bits(got.tensors[i].values, want.tensors[i].values));
  }
}

std::string step_dir(const std::string& root, int64_t step) { return root + "/" + checkpoint_step_name(step); }

TEST_CASE("checkpoint round trip keeps every tensor bit for bit, in order") {
  TempDir dir;
  Checkpoint c = sample_checkpoint(120);
  REQUIRE(write_checkpoint(dir.path, c, 3).ok());
  const std::string step = step_dir(dir.path, 120);
  CHECK(fs::is_regular_file(step + "/model.safetensors"));
  CHECK(read_text(dir.path + "/latest") == "step-00000120\n");

  for (const std::string& where : {step, step + "/", dir.path, dir.path + "/"}) {
    CAPTURE(where);
    auto got = read_checkpoint(where);
    REQUIRE_MESSAGE(got.ok(), got.status().to_string());
    check_equal(*got, c);
  }

  // The safetensors header is 8-byte aligned and meta.json says what is inside.
  std::string model = read_text(step + "/model.safetensors");
  uint64_t header_bytes;
  std::memcpy(&header_bytes, model.data(), 8);
  CHECK((8 + header_bytes) % 8 == 0);
  CHECK(model.size() == 8 + header_bytes + (6 + 6 + 1 + 3 + 3 + 3) * sizeof(float));
  auto meta = nlohmann::json::parse(read_text(step + "/meta.json"));
  CHECK(meta["format"] == 1);
  CHECK(meta["step"] == 120);
  CHECK(meta["job"] == "mlp");
  CHECK(meta["optimizer"]["name"] == "adam");
  CHECK(meta["optimizer"]["states"] == nlohmann::json({"adam_m", "adam_v", "momentum"}));
  CHECK(meta["tensors"][1]["role"] == "optimizer_state");
  CHECK(meta["tensors"][4]["role"] == "variable");
}

TEST_CASE("checkpoint write refuses bad input and names OS failures") {
  TempDir dir;
  Checkpoint c = sample_checkpoint(1);
  CHECK(write_checkpoint(dir.path, c, 0).code() == Code::kInvalidArgument);
  CHECK(write_checkpoint("", c, 1).code() == Code::kInvalidArgument);
  Checkpoint bad = c;
  bad.tensors[0].values.pop_back();
  CHECK(write_checkpoint(dir.path, bad, 1).code() == Code::kInvalidArgument);
  bad = c;
  bad.tensors[1].name = "w1";
  CHECK(write_checkpoint(dir.path, bad, 1).code() == Code::kInvalidArgument);
  bad = c;
  bad.step = -1;
  CHECK(write_checkpoint(dir.path, bad, 1).code() == Code::kInvalidArgument);
  bad = c;
  bad.job = "\xff\xfe";
  CHECK(write_checkpoint(dir.path, bad, 1).code() == Code::kInvalidArgument);
  CHECK(fs::is_empty(dir.path));

  write_text(dir.path + "/blocker", "a file, not a directory");
  Status s = write_checkpoint(dir.path + "/blocker/ckpt", c, 1);
  CHECK(!s.ok());
  CHECK(s.message().find(dir.path + "/blocker") != std::string::npos);
  CHECK(s.message().find("Not a directory") != std::string::npos);
}

TEST_CASE("checkpoint keep_last prunes older steps only once the new one is complete") {
  TempDir dir;
  for (int64_t step = 1; step <= 5; ++step) REQUIRE(write_checkpoint(dir.path, sample_checkpoint(step), 2).ok());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"latest", "step-00000004", "step-00000005"});

  REQUIRE(write_checkpoint(dir.path, sample_checkpoint(6), 1).ok());
  CHECK(!fs::exists(step_dir(dir.path, 4)));
  CHECK(!fs::exists(step_dir(dir.path, 5)));

  // Resuming from an earlier step and saving again: `latest` follows the new
  // checkpoint; the later step of the abandoned run is not deleted.
  REQUIRE(write_checkpoint(dir.path, sample_checkpoint(3), 1).ok());
  CHECK(*latest_checkpoint(dir.path) == step_dir(dir.path, 3));
  CHECK(fs::exists(step_dir(dir.path, 6)));
  CHECK(read_checkpoint(dir.path)->step == 3);
}

TEST_CASE("checkpoint rewriting a step replaces it whole") {
  TempDir dir;
  REQUIRE(write_checkpoint(dir.path, sample_checkpoint(7), 2).ok());
  Checkpoint c = sample_checkpoint(7);
  c.tensors.resize(1);
  c.tensors[0].values[0] = 99.0f;
  c.metadata.clear();
  REQUIRE(write_checkpoint(dir.path, c, 2).ok());
  auto got = read_checkpoint(step_dir(dir.path, 7));
  REQUIRE_MESSAGE(got.ok(), got.status().to_string());
  check_equal(*got, c);
  for (const auto& e : fs::directory_iterator(dir.path))  // no temporary left behind
    CHECK(e.path().filename().string().front() != '.');
}

TEST_CASE("checkpoint latest ignores unfinished writes and survives a missing latest file") {
  TempDir dir;
  CHECK(latest_checkpoint(dir.path).status().code() == Code::kNotFound);
  CHECK(read_checkpoint(dir.path).status().code() == Code::kNotFound);
  CHECK(read_checkpoint(dir.path + "/nowhere").status().code() == Code::kNotFound);
  REQUIRE(write_checkpoint(dir.path, sample_checkpoint(3), 5).ok());

  // A writer that died mid-write left a temporary directory with a half file,
  // for a later step, under another process id and under ours.
  const std::string ours = ".tmp-step-00000004-" + std::to_string(::getpid());
  for (const std::string& tmp : {std::string(".tmp-step-00000004-999999"), ours}) {
    fs::create_directories(dir.path + "/" + tmp);
    write_text(dir.path + "/" + tmp + "/model.safetensors", "\x10\x00\x00");
  }
  CHECK(*latest_checkpoint(dir.path) == step_dir(dir.path, 3));
  CHECK(read_checkpoint(dir.path)->step == 3);
  // This process's leftover does not stop it from writing that step.
  REQUIRE(write_checkpoint(dir.path, sample_checkpoint(4), 5).ok());
  CHECK(read_checkpoint(dir.path)->step == 4);
  CHECK(fs::exists(dir.path + "/.tmp-step-00000004-999999"));  // another writer's: left alone

  // A directory that only looks like a step, and a stale or missing `latest`.
  fs::create_directories(dir.path + "/step-00000009");
  fs::create_directories(dir.path + "/step-12");
  CHECK(*latest_checkpoint(dir.path) == step_dir(dir.path, 4));
  write_text(dir.path + "/latest", "step-00000008\n");
  CHECK(*latest_checkpoint(dir.path) == step_dir(dir.path, 4));
  fs::remove(dir.path + "/latest");
  CHECK(*latest_checkpoint(dir.path) == step_dir(dir.path, 4));
  write_text(dir.path + "/latest", "step-00000003");
  CHECK(*latest_checkpoint(dir.path) == step_dir(dir.path, 3));
}

// A valid checkpoint of tensors a [2] and b [3] whose model file is then replaced.
struct CorruptCase {
  const char* what;
  std::string model;  // full file contents
  const char* expect;
};

std::string model_file(const std::string& header, size_t data_bytes, int64_t header_len = -1) {
  uint64_t n = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

std::string two_tensors(const std::string& a, const std::string& b) {
  return "{\"a\":" + a + ",\"b\":" + b + "}";
}

TEST_CASE("checkpoint read rejects corrupt model files with kDataLoss naming file and problem") {
  TempDir dir;
  Checkpoint c;
  c.step = 2;
  c.job = "j";
  c.tensors = {{"a", {2}, {1, 2}}, {"b", {3}, {3, 4, 5}}};
  REQUIRE(write_checkpoint(dir.path, c, 1).ok());
  const std::string step = step_dir(dir.path, 2), model = step + "/model.safetensors";
  const std::string a_ok = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string b_ok = R"({"dtype":"F32","shape":[3],"data_offsets":[8,20]})";
  REQUIRE(read_checkpoint(step).ok());

  const CorruptCase cases[] = {
      {"empty file", "", "too short"},
      {"short file", std::string("\x02\x00\x00", 3), "too short"},
      {"header length past the end", model_file("{}", 0, 1000), "runs past the end"},
      {"huge header length", model_file("{}", 0, std::numeric_limits<int64_t>::max()), "runs past the end"},
      {"bad JSON", model_file(R"({"a": {"dtype")", 20), "not a JSON object"},
      {"JSON array", model_file("[1, 2]", 20), "not a JSON object"},
      {"dtype F64", model_file(two_tensors(R"({"dtype":"F64","shape":[2],"data_offsets":[0,8]})", b_ok), 20),
       "F32, I32, BF16 and F16 are read"},
      {"F16 of the wrong size",
       model_file(two_tensors(R"({"dtype":"F16","shape":[2],"data_offsets":[0,8]})", b_ok), 20),
       "has shape [2] but 8 data bytes"},
      {"no dtype", model_file(two_tensors(R"({"shape":[2],"data_offsets":[0,8]})", b_ok), 20), "no dtype"},
      {"negative dim", model_file(two_tensors(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", b_ok), 20),
       "non-negative"},
      {"offsets outside the data",
       model_file(two_tensors(a_ok, R"({"dtype":"F32","shape":[3],"data_offsets":[8,40]})"), 20), "outside"},
      {"offsets reversed", model_file(two_tensors(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})", b_ok), 20),
       "outside"},
      {"one offset", model_file(two_tensors(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})", b_ok), 20),
       "data_offsets"},
      {"overlap", model_file(two_tensors(a_ok, R"({"dtype":"F32","shape":[3],"data_offsets":[4,16]})"), 20),
       "overlap"},
      {"misaligned", model_file(two_tensors(R"({"dtype":"F32","shape":[2],"data_offsets":[2,10]})", b_ok), 20),
       "misaligned"},
      {"shape and bytes differ",
       model_file(two_tensors(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", b_ok), 20),
       "has shape [3] but 8 data bytes"},
      {"gap", model_file(two_tensors(a_ok, R"({"dtype":"F32","shape":[3],"data_offsets":[12,24]})"), 24),
       "no tensor covers"},
      {"trailing bytes", model_file(two_tensors(a_ok, b_ok), 24), "cover"},
      {"truncated data", model_file(two_tensors(a_ok, b_ok), 16), "outside"},
      {"metadata not strings", model_file(R"({"__metadata__":{"k":1},"a":)" + a_ok + ",\"b\":" + b_ok + "}", 20),
       "not a string"},
      {"tensor missing from model", model_file(R"({"a":)" + a_ok + "}", 8), "lists 2 tensors"},
      {"tensor renamed", model_file(R"({"a":)" + a_ok + ",\"c\":" + b_ok + "}", 20), "does not hold"},
  };
  for (const CorruptCase& k : cases) {
    CAPTURE(k.what);
    write_text(model, k.model);
    auto got = read_checkpoint(step);
    REQUIRE(!got.ok());
    CHECK(got.status().code() == Code::kDataLoss);
    CHECK_MESSAGE(got.status().message().find("model.safetensors") != std::string::npos, got.status().message());
    CHECK_MESSAGE(got.status().message().find(k.expect) != std::string::npos, got.status().message());
  }
  write_text(model, model_file(two_tensors(a_ok, b_ok), 20));
  REQUIRE(read_checkpoint(step).ok());  // the hand-made file itself is valid

  const std::string meta_path = step + "/meta.json", meta = read_text(meta_path);
  auto edit = [&](const char* key, const nlohmann::json& value) {
    auto m = nlohmann::json::parse(meta);
    m[key] = value;
    return m.dump();
  };
  const std::pair<std::string, const char*> meta_cases[] = {
      {"{\"format\": 1, \"step\"", "not a JSON object"},
      {edit("format", 3), "\"format\" must be 1 or 2"},
      {edit("format", 2), "format 2 needs the arrays"},
      {edit("step", -2), "\"step\""},
      {edit("step", 3), "does not match the directory"},
      {edit("job", 5), "\"job\""},
      {edit("tensors", {{{"name", "a"}, {"shape", {2}}}}), "lists 1 tensors"},
      {edit("tensors", {{{"name", "a"}, {"shape", {2}}}, {{"name", "a"}, {"shape", {2}}}}), "listed twice"},
      {edit("tensors", {{{"name", "a"}, {"shape", {2}}}, {{"name", "b"}, {"shape", {1, 3}}}}), "has shape"},
      {edit("tensors", {{{"name", "a"}}, {{"name", "b"}, {"shape", {3}}}}), "tensors[0]"},
  };
  for (const auto& [text, expect] : meta_cases) {
    CAPTURE(text);
    write_text(meta_path, text);
    auto got = read_checkpoint(step);
    REQUIRE(!got.ok());
    CHECK(got.status().code() == Code::kDataLoss);
    CHECK_MESSAGE(got.status().message().find("meta.json") != std::string::npos, got.status().message());
    CHECK_MESSAGE(got.status().message().find(expect) != std::string::npos, got.status().message());
  }
}

TEST_CASE("checkpoint read survives fuzzed files: truncations and byte flips") {
  TempDir dir;
  REQUIRE(write_checkpoint(dir.path, sample_checkpoint(5), 1).ok());
  const std::string step = step_dir(dir.path, 5);
  for (const char* file : {"model.safetensors", "meta.json"}) {
    CAPTURE(file);
    const std::string path = step + "/" + file, original = read_text(path);
    uint64_t header_end = original.size();
    if (std::string(file) == "model.safetensors") {
      std::memcpy(&header_end, original.data(), 8);
      header_end += 8;
    }
    std::mt19937 rng(1234);
    int failures = 0;
    for (int i = 0; i < 1500; ++i) {
      std::string bytes = original;
      const bool truncate = i % 3 == 0;
      if (truncate) {
        // Dropping meta.json's final newline alone would leave valid JSON.
        bytes.resize(std::uniform_int_distribution<size_t>(0, bytes.size() - 2)(rng));
      } else {
        int flips = std::uniform_int_distribution<int>(1, 4)(rng);
        for (int f = 0; f < flips; ++f) {
          // Mostly the header, where the parsing is.
          size_t limit = rng() % 4 ? header_end : bytes.size();
          size_t at = std::uniform_int_distribution<size_t>(0, limit - 1)(rng);
          bytes[at] = static_cast<char>(rng() % 2 ? bytes[at] ^ (1 << (rng() % 8)) : rng());
        }
      }
      write_text(path, bytes);
      auto got = read_checkpoint(step);
      if (got.ok()) {
        CHECK(!truncate);
        CHECK(got->tensors.size() == 7);
        continue;
      }
      ++failures;
      CHECK_MESSAGE(got.status().code() == Code::kDataLoss, got.status().to_string());
      CHECK_MESSAGE(got.status().message().find(file) != std::string::npos, got.status().message());
    }
    CHECK(failures >= 500);  // every truncation at least
    write_text(path, original);
  }
  CHECK(read_checkpoint(step).ok());
}

// Runs a shell command and returns its standard output.
std::string run_command(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  *status = ::pclose(pipe);
  return out;
}

TEST_CASE("checkpoint files are readable with numpy alone") {
  // A prerequisite, not an option: `./dev test` installs python3-numpy, and a
  // machine without it fails here with the reason rather than passing silently.
  REQUIRE_MESSAGE(std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0,
                  "/usr/bin/python3 cannot import numpy: apt-get install python3-numpy (./dev test does)");
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  const std::string script = std::string(root ? root : ".") + "/tests/runtime/read_safetensors.py";
  REQUIRE_MESSAGE(fs::exists(script), ("set RILL_SOURCE_ROOT to the source tree: " + script));
  TempDir dir;
  Checkpoint c = sample_checkpoint(11);
  c.tensors[1].values[2] = std::numeric_limits<float>::quiet_NaN();
  c.tensors[1].values[3] = -std::numeric_limits<float>::infinity();
  c.tensors[1].values[4] = std::numeric_limits<float>::denorm_min();
  // The other dtypes: I32 as its ints, BF16 and F16 rounded (what Rill reads back).
  c.tensors.push_back({"steps", {2}, {}, DType::kI32});
  for (int32_t v : {-7, 1 << 30}) c.tensors.back().values.push_back(std::bit_cast<float>(v));
  c.tensors.push_back({"w_bf16", {3}, {1.0f / 3, -65504.0f, 1e-30f}, DType::kBF16});
  c.tensors.push_back({"w_f16", {3}, {1.0f / 3, -65504.0f, 1e-6f}, DType::kF16});
  REQUIRE(write_checkpoint(dir.path, c, 1).ok());
  auto back = read_checkpoint(dir.path);
  REQUIRE(back.ok());
  c = *back;

  int status = 0;
  std::string out = run_command("/usr/bin/python3 " + script + " " + step_dir(dir.path, 11) + "/model.safetensors",
                                &status);
  REQUIRE_MESSAGE(status == 0, out);
  std::map<std::string, CheckpointTensor> seen;
  std::map<std::string, std::string> metadata;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string kind, name, shape_text;
    words >> kind >> name;
    if (kind == "metadata") {
      std::string value;
      std::getline(words >> std::ws, value);
      metadata[name] = value;
      continue;
    }
    REQUIRE(kind == "tensor");
    std::string dtype;
    words >> dtype >> shape_text;  // "F32", "[2,3]" ("[]" for a scalar)
    REQUIRE(shape_text.size() >= 2);
    CheckpointTensor t{name, {}, {}, dtype == "I32" ? DType::kI32 : DType::kF32};
    std::istringstream dims(shape_text.substr(1, shape_text.size() - 2));
    for (std::string d; std::getline(dims, d, ',');) t.shape.push_back(std::stoll(d));
    for (std::string v; words >> v;)
      t.values.push_back(dtype == "I32" ? std::bit_cast<float>(static_cast<int32_t>(std::stoll(v)))
                                        : static_cast<float>(std::strtod(v.c_str(), nullptr)));
    if (name == "w_bf16") CHECK(dtype == "BF16");
    if (name == "w_f16") CHECK(dtype == "F16");
    seen[name] = t;
  }
  CHECK(metadata == c.metadata);
  REQUIRE(seen.size() == c.tensors.size());
  for (const CheckpointTensor& want : c.tensors) {
    CAPTURE(want.name);
    const CheckpointTensor& got = seen[want.name];
    CHECK(got.shape == want.shape);
    REQUIRE(got.values.size() == want.values.size());
    for (size_t i = 0; i < want.values.size(); ++i) {
      if (std::isnan(want.values[i])) CHECK(std::isnan(got.values[i]));
      else CHECK(std::memcmp(&got.values[i], &want.values[i], sizeof(float)) == 0);
    }
  }
}

// checkpoint.dtype's tensors: an I32 tensor's ints bit for bit; BF16 and
// F16 hold each f32 value rounded to nearest even (base/half.h), 2 bytes an
// element, and read back as those rounded values; the header and meta.json
// name the dtypes.
TEST_CASE("checkpoint tensors in I32, BF16 and F16: the file says so, 16-bit values rounded") {
  TempDir dir;
  Checkpoint c;
  c.step = 4;
  c.job = "dtypes";
  const std::vector<float> values = {1.0f / 3, -2.5f, 70000.0f, 1e-8f};
  c.tensors = {{"f32", {4}, values, DType::kF32},
               {"bf16", {2, 2}, values, DType::kBF16},
               {"f16", {4}, values, DType::kF16},
               {"i32", {2}, {std::bit_cast<float>(int32_t{-3}), std::bit_cast<float>(int32_t{1 << 29})}, DType::kI32}};
  REQUIRE(write_checkpoint(dir.path, c, 1).ok());
  auto got = read_checkpoint(dir.path);
  REQUIRE_MESSAGE(got.ok(), got.status().to_string());
  REQUIRE(got->tensors.size() == 4);
  CHECK(same_bits(got->tensors[0].values, values));
  CHECK(got->tensors[1].dtype == DType::kBF16);
  CHECK(got->tensors[1].shape == Shape{2, 2});
  for (size_t i = 0; i < values.size(); ++i) {
    CHECK(got->tensors[1].values[i] == BFloat16::from_float(values[i]).to_float());
    CHECK(got->tensors[2].values[i] == Float16::from_float(values[i]).to_float());
  }
  CHECK(std::isinf(got->tensors[2].values[2]));  // beyond f16's 65504
  CHECK(got->tensors[3].dtype == DType::kI32);
  CHECK(same_bits(got->tensors[3].values, c.tensors[3].values));
  const std::string step = step_dir(dir.path, 4);
  std::string model = read_text(step + "/model.safetensors");
  uint64_t header_bytes;
  std::memcpy(&header_bytes, model.data(), 8);
  CHECK(model.size() == 8 + header_bytes + 4 * 4 + 4 * 2 + 4 * 2 + 2 * 4);
  auto header = nlohmann::json::parse(model.substr(8, header_bytes));
  CHECK(header["bf16"]["dtype"] == "BF16");
  CHECK(header["f16"]["dtype"] == "F16");
  CHECK(header["i32"]["dtype"] == "I32");
  auto meta = nlohmann::json::parse(read_text(step + "/meta.json"));
  CHECK(meta["tensors"][1]["dtype"] == "BF16");
}

}  // namespace
}  // namespace rill
