// Checkpoints every node writes itself (runtime/checkpoint/checkpoint_pieces.h):
// each node's file of pieces, the meta.json written last, read back whole
// whatever the layout; a step without its meta.json is absent; a node
// killed at any moment of its write, mid-write included, never leaves a
// step that reads torn.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_pieces.h"
#include "tests/runtime/stop_child.h"

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

// A node's pieces of w [4096, 1024] at `step`: its 2048 rows as 8 blocks of
// 1 MiB, so its file is written in 10 write()s (length, header, blocks),
// each value the step.
std::vector<TensorPiece> node_pieces(int64_t step, int node) {
  std::vector<TensorPiece> out;
  for (int64_t b = 0; b < 8; ++b)
    out.push_back(TensorPiece{"w", {4096, 1024}, {2048 * node + 256 * b, 0}, {256, 1024}, DType::kF32,
                              std::vector<float>(size_t{256} * 1024, static_cast<float>(step))});
  return out;
}

// A node file's temporary, partly written, as a stopped writer left it.
struct MidWrite {
  int64_t step = -1;
  fs::path temporary;
  uintmax_t bytes = 0;
};

// Node `node`'s temporary under `root` as written by process `pid`, if it
// holds more than nothing and less than the whole file of `whole` bytes;
// of step 2 on, so that a complete step comes before it.
std::optional<MidWrite> mid_write(const fs::path& root, pid_t pid, int node, uintmax_t whole) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    const fs::path temporary = entry.path() / fmt::format(".node-{}.safetensors.tmp-{}", node, pid);
    const uintmax_t bytes = fs::file_size(temporary, ec);
    const int64_t step = std::stoll(name.substr(5));
    if (ec || bytes == 0 || bytes >= whole || step < 2) continue;
    return MidWrite{step, temporary, bytes};
  }
  return std::nullopt;
}

// Two "nodes" (one child process writing both files, then the meta) write
// step after step (8 MiB a file) as fast as they can. In even rounds the
// test kills the child at a random moment; in odd ones it stops the child
// at random moments until one of a node's files (node 0's, then node 1's)
// is partly written under its temporary name, and kills it there. After
// each kill `latest` names a complete step whose every value is its own,
// and the step never goes back; after a kill mid-write the step being
// written is absent from what a resume reads, and the one before it is
// what reads back.
TEST_CASE("nodes killed at any moment of their writes, mid-write included, never leave a step that reads torn") {
  const fs::path root = fresh_dir("kill");
  // The whole size of each node's file (the same at every step).
  uintmax_t whole[2] = {};
  for (int node = 0; node < 2; ++node) {
    auto f = write_node_file((root / "sizes").string(), 0, node, 2, node_pieces(0, node));
    REQUIRE(f.ok());
    whole[node] = static_cast<uintmax_t>(f->bytes);
  }
  fs::remove_all(root / "sizes");
  std::mt19937 rng(11);
  int64_t step = 0;
  int found = 0, torn_folders = 0, mid_writes = 0;
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    // Each child is a run going on from `step`: what the last one wrote
    // after it (a step whose meta.json came before `latest` moved) goes.
    REQUIRE(drop_steps_after(root.string(), step).ok());
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (int64_t s = step + 1;; ++s) {
        std::vector<NodeFile> files;
        for (int node = 0; node < 2; ++node) {
          auto f = write_node_file(root.string(), s, node, 2, node_pieces(s, node));
          if (!f.ok()) ::_exit(3);
          files.push_back(*f);
        }
        if (!write_step_meta(root.string(), s, "killed", "sgd", files, 2).ok()) ::_exit(4);
      }
    }
    std::optional<MidWrite> cut;
    if (round % 2 == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 300));
    } else {
      const int node = (round / 2) % 2;
      CAPTURE(node);
      int status = 0;
      const testing::Stopped stopped = testing::stop_where(
          child, rng, 5000, 4000, [&] { return (cut = mid_write(root, child, node, whole[node])).has_value(); },
          &status);
      if (stopped == testing::Stopped::kEnded) FAIL("the writer ended on its own, status ", status);
      if (stopped == testing::Stopped::kMissed) testing::kill_child(child);
      REQUIRE_MESSAGE(stopped == testing::Stopped::kLanded, "never stopped while node ", node,
                      "'s file was partly written");
    }
    const int wstatus = testing::kill_child(child);
    CHECK(WIFSIGNALED(wstatus));
    for (const auto& entry : fs::directory_iterator(root))
      torn_folders += entry.is_directory() && !fs::exists(entry.path() / "meta.json");
    if (cut) {
      ++mid_writes;
      CAPTURE(cut->temporary);
      // The kill found the file as the stop did: partly written, not renamed.
      CHECK(fs::file_size(cut->temporary) == cut->bytes);
      CHECK_FALSE(fs::exists(cut->temporary.parent_path() / "meta.json"));
      // The step being written is no checkpoint; the one before it is the newest.
      const std::vector<int64_t> steps = checkpoint_steps(root.string());
      CHECK(std::find(steps.begin(), steps.end(), cut->step) == steps.end());
      auto latest = latest_checkpoint(root.string());
      REQUIRE_MESSAGE(latest.ok(), latest.status().to_string());
      CHECK(fs::path(*latest).filename() == checkpoint_step_name(cut->step - 1));
      REQUIRE_FALSE(steps.empty());
      CHECK(steps.back() == cut->step - 1);
    }
    auto latest = latest_checkpoint(root.string());
    if (!latest.ok()) {
      CHECK(latest.status().code() == Code::kNotFound);
      CHECK(step == 0);
      continue;
    }
    auto c = read_checkpoint(root.string());  // what `--resume latest` reads
    REQUIRE_MESSAGE(c.ok(), c.status().to_string());
    REQUIRE(c->tensors.size() == 1);
    CHECK(c->tensors[0].shape == Shape{4096, 1024});
    bool all_step = true;
    for (float v : c->tensors[0].values) all_step = all_step && v == static_cast<float>(c->step);
    CHECK(all_step);
    CHECK(c->step >= step);
    if (cut) {
      CHECK(c->step == cut->step - 1);
      // A run going on from there drops the cut step's folder, and its temporary with it.
      REQUIRE(drop_steps_after(root.string(), c->step).ok());
      CHECK_FALSE(fs::exists(cut->temporary.parent_path()));
    }
    step = c->step;
    ++found;
  }
  CHECK(found >= 7);
  CHECK(mid_writes == 5);
  MESSAGE(found, " kills after a complete step, ", mid_writes, " of them mid-write of a node's file; ", torn_folders,
          " times a step's folder lacked its meta.json");
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
