// Checkpoints every node writes itself (runtime/checkpoint/checkpoint_pieces.h):
// each node's file of pieces, the meta.json written last, read back whole
// whatever the layout; a step without its meta.json is absent; a node
// killed at any moment of its write never leaves a step that reads torn.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_pieces.h"

namespace rill {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / fmt::format("rill-pieces-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  return dir;
}

// w is [4, 3] with w[i][j] = 10 i + j + step; its momentum the negation.
// `rows` of it as a piece.
std::vector<TensorPiece> rows_of(int64_t step, int64_t begin, int64_t end) {
  std::vector<float> w, m;
  for (int64_t i = begin; i < end; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      w.push_back(static_cast<float>(10 * i + j + step));
      m.push_back(-w.back());
    }
  return {TensorPiece{"w", {4, 3}, {begin, 0}, {end - begin, 3}, DType::kF32, w},
          TensorPiece{"w/momentum", {4, 3}, {begin, 0}, {end - begin, 3}, DType::kF32, m}};
}

void check_whole(const Checkpoint& c, int64_t step) {
  REQUIRE(c.tensors.size() == 2);
  CHECK(c.step == step);
  CHECK(c.tensors[0].name == "w");
  CHECK(c.tensors[1].name == "w/momentum");
  for (int64_t i = 0; i < 12; ++i) {
    CHECK(c.tensors[0].values[static_cast<size_t>(i)] == static_cast<float>(10 * (i / 3) + i % 3 + step));
    CHECK(c.tensors[1].values[static_cast<size_t>(i)] == -c.tensors[0].values[static_cast<size_t>(i)]);
  }
}

TEST_CASE("two nodes' files and the master's meta.json read back as whole tensors") {
  const fs::path dir = fresh_dir("two");
  auto a = write_node_file(dir.string(), 20, 0, 2, rows_of(20, 0, 1));
  auto b = write_node_file(dir.string(), 20, 1, 2, rows_of(20, 1, 4));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->file == "node-0.safetensors");
  CHECK(b->pieces.size() == 2);
  CHECK(b->pieces[0].values.empty());  // the values went to disk, not into the report
  // Not a checkpoint until the master says so.
  CHECK(latest_checkpoint(dir.string()).status().code() == Code::kNotFound);
  REQUIRE(write_step_meta(dir.string(), 20, "job", "sgd", {*a, *b}, 2).ok());
  auto c = read_checkpoint(dir.string());
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  check_whole(*c, 20);
  CHECK(c->metadata.at("optimizer") == "sgd");
  std::ifstream meta(dir / "step-00000020" / "meta.json");
  const auto j = nlohmann::json::parse(meta);
  CHECK(j["format"] == 2);
  CHECK(j["pieces"].size() == 4);
  fs::remove_all(dir);
}

TEST_CASE("one node's file holds whole tensors: model.safetensors with format 1's meta.json") {
  const fs::path dir = fresh_dir("one");
  std::vector<TensorPiece> both = rows_of(7, 0, 2);
  for (TensorPiece& p : rows_of(7, 2, 4)) both.push_back(std::move(p));  // two devices' pieces of one node
  auto file = write_node_file(dir.string(), 7, 0, 1, both);
  REQUIRE(file.ok());
  CHECK(file->file == "model.safetensors");
  REQUIRE(write_step_meta(dir.string(), 7, "job", "sgd", {*file}, 1).ok());
  std::ifstream meta(dir / "step-00000007" / "meta.json");
  CHECK(nlohmann::json::parse(meta)["format"] == 1);
  auto c = read_checkpoint(dir.string());
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  check_whole(*c, 7);
  fs::remove_all(dir);
}

TEST_CASE("pieces that do not tile their tensor are refused, naming the tensor") {
  const fs::path dir = fresh_dir("tile");
  auto a = write_node_file(dir.string(), 1, 0, 2, rows_of(1, 0, 2));
  auto b = write_node_file(dir.string(), 1, 1, 2, rows_of(1, 1, 4));  // row 1 twice
  auto c = write_node_file(dir.string(), 1, 1, 2, rows_of(1, 3, 4));  // row 2 nowhere
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  Status twice = write_step_meta(dir.string(), 1, "job", "sgd", {*a, *b}, 2);
  CHECK(twice.code() == Code::kInvalidArgument);
  CHECK(twice.message().find("two pieces of w") != std::string::npos);
  Status gap = write_step_meta(dir.string(), 1, "job", "sgd", {*a, *c}, 2);
  CHECK(gap.message().find("the pieces of w cover 9 of its 12 elements") != std::string::npos);
  CHECK(checkpoint_steps(dir.string()).empty());
  fs::remove_all(dir);
}

TEST_CASE("a meta.json naming a piece its file lacks, or a file outside the step, is data loss") {
  const fs::path dir = fresh_dir("lies");
  auto a = write_node_file(dir.string(), 3, 0, 2, rows_of(3, 0, 2));
  auto b = write_node_file(dir.string(), 3, 1, 2, rows_of(3, 2, 4));
  REQUIRE(write_step_meta(dir.string(), 3, "job", "sgd", {*a, *b}, 2).ok());
  const fs::path meta_path = dir / "step-00000003" / "meta.json";
  std::ifstream in(meta_path);
  const nlohmann::json meta = nlohmann::json::parse(in);
  auto rewrite = [&](const nlohmann::json& j) { std::ofstream(meta_path) << j.dump(); };
  nlohmann::json renamed = meta;
  renamed["pieces"][0]["key"] = "w@9,9";
  rewrite(renamed);
  auto c = read_checkpoint(dir.string());
  CHECK(c.status().code() == Code::kDataLoss);
  CHECK(c.status().message().find("holds no tensor \"w@9,9\"") != std::string::npos);
  nlohmann::json outside = meta;
  outside["files"][0]["file"] = "../../etc/passwd";
  rewrite(outside);
  c = read_checkpoint(dir.string());
  CHECK(c.status().code() == Code::kDataLoss);
  CHECK(c.status().message().find("not a file of the step folder") != std::string::npos);
  fs::remove(dir / "step-00000003" / "node-1.safetensors");
  rewrite(meta);
  CHECK(read_checkpoint(dir.string()).status().code() == Code::kNotFound);
  fs::remove_all(dir);
}

TEST_CASE("a run going on from a step drops what an earlier run left after it, whole or not") {
  const fs::path dir = fresh_dir("drop");
  for (int64_t step : {10, 20, 30}) {
    auto a = write_node_file(dir.string(), step, 0, 2, rows_of(step, 0, 2));
    auto b = write_node_file(dir.string(), step, 1, 2, rows_of(step, 2, 4));
    if (step < 30) REQUIRE(write_step_meta(dir.string(), step, "job", "sgd", {*a, *b}, 5).ok());
  }
  REQUIRE(fs::exists(dir / "step-00000030"));  // files without a meta.json: not a step
  CHECK(checkpoint_steps(dir.string()) == std::vector<int64_t>{10, 20});
  REQUIRE(drop_steps_after(dir.string(), 10).ok());
  CHECK(checkpoint_steps(dir.string()) == std::vector<int64_t>{10});
  CHECK_FALSE(fs::exists(dir / "step-00000030"));
  auto c = read_checkpoint(dir.string());  // `latest` names the dropped 20: the newest complete step instead
  REQUIRE(c.ok());
  CHECK(c->step == 10);
  fs::remove_all(dir);
}

// Two "nodes" (one child process writing both files, then the meta) write
// step after step (8 MiB a file) as fast as they can; the test kills the
// child at random moments. After each kill `latest` names a complete step
// whose every value is its own, and the step never goes back.
TEST_CASE("nodes killed at any moment of their writes never leave a step that reads torn") {
  const fs::path root = fresh_dir("kill");
  std::mt19937 rng(11);
  int64_t step = 0;
  int found = 0, torn_folders = 0;
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (int64_t s = step + 1;; ++s) {
        std::vector<NodeFile> files;
        for (int node = 0; node < 2; ++node) {
          std::vector<float> values(size_t{1} << 21, static_cast<float>(s));
          auto f = write_node_file(root.string(), s, node, 2,
                                   {TensorPiece{"w", {4096, 1024}, {2048 * node, 0}, {2048, 1024}, DType::kF32, values}});
          if (!f.ok()) ::_exit(3);
          files.push_back(*f);
        }
        if (!write_step_meta(root.string(), s, "killed", "sgd", files, 2).ok()) ::_exit(4);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 300));
    ::kill(child, SIGKILL);
    int wstatus = 0;
    ::waitpid(child, &wstatus, 0);
    CHECK(WIFSIGNALED(wstatus));
    for (const auto& entry : fs::directory_iterator(root))
      torn_folders += entry.is_directory() && !fs::exists(entry.path() / "meta.json");
    auto latest = latest_checkpoint(root.string());
    if (!latest.ok()) {
      CHECK(latest.status().code() == Code::kNotFound);
      CHECK(step == 0);
      continue;
    }
    auto c = read_checkpoint(*latest);
    REQUIRE_MESSAGE(c.ok(), c.status().to_string());
    bool all_step = true;
    for (float v : c->tensors[0].values) all_step = all_step && v == static_cast<float>(c->step);
    CHECK(all_step);
    CHECK(c->step >= step);
    step = c->step;
    ++found;
  }
  CHECK(found >= 7);
  MESSAGE(found, " kills after a complete step; ", torn_folders, " times a step's folder lacked its meta.json");
  fs::remove_all(root);
}

}  // namespace
}  // namespace rill

namespace rill {
namespace {

// A hostile or corrupt meta.json: sizes that overflow, a tensor no piece
// holds that would take a terabyte. Each is data loss, nothing allocated
// for it and nothing written out of bounds.
TEST_CASE("a meta.json whose shapes overflow or that no piece holds is data loss") {
  const fs::path dir = fresh_dir("overflow");
  auto a = write_node_file(dir.string(), 4, 0, 2, rows_of(4, 0, 2));
  auto b = write_node_file(dir.string(), 4, 1, 2, rows_of(4, 2, 4));
  REQUIRE(write_step_meta(dir.string(), 4, "job", "sgd", {*a, *b}, 2).ok());
  const fs::path meta_path = dir / "step-00000004" / "meta.json";
  std::ifstream in(meta_path);
  const nlohmann::json meta = nlohmann::json::parse(in);
  auto read_with = [&](const nlohmann::json& j) {
    std::ofstream(meta_path) << j.dump();
    return read_checkpoint(dir.string()).status();
  };
  nlohmann::json wrapped = meta;  // [2^62 + 1, 4]: 2^64 + 4 elements, 4 when wrapped
  wrapped["tensors"][0]["shape"] = {(int64_t{1} << 62) + 1, 4};
  wrapped["pieces"][0]["offset"] = {int64_t{1} << 40, 0};
  Status s = read_with(wrapped);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message().find("too large") != std::string::npos);
  nlohmann::json huge = meta;  // a terabyte no piece holds
  huge["tensors"].push_back({{"name", "ghost"}, {"shape", {int64_t{1} << 38}}, {"dtype", "F32"}});
  s = read_with(huge);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message().find("no piece holds ghost") != std::string::npos);
  nlohmann::json past = meta;  // a piece past its tensor's end
  past["pieces"][0]["offset"] = {int64_t{9223372036854775807}, 0};
  s = read_with(past);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message().find("outside its shape") != std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rill
