// Checkpoints off the training path: a node's collector hands a complete
// step to its own writer thread (training's add() waits for the disk only
// when the writer falls kMaxWaiting steps behind), the master's completer
// makes a step complete once every writing node's file is there, and a
// writer killed at any moment never leaves `latest` naming a partial
// checkpoint.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_collector.h"
#include "runtime/checkpoint/checkpoint_completer.h"

namespace rill {
namespace {

namespace fs = std::filesystem;

// A job of one variable in two pieces (rows 0-1 and 2-3 of a [4, 2]).
graph::Job two_piece_job() {
  graph::Job job;
  job.name = "collect";
  job.optimizer.type = "sgd";
  job.checkpoint.dir = "unused";
  return job;
}

const std::vector<SnapshotPiece> kPieces = {{"w", {0, 0}}, {"w", {2, 0}}};

VariablePiece piece(int64_t row, float value) {
  return VariablePiece{"w", {4, 2}, {row, 0}, {2, 2}, std::vector<float>(4, value), {}};
}

// The pieces a writer got, joined: the [4, 2] tensor's values.
std::vector<float> joined(const std::vector<TensorPiece>& pieces) {
  std::vector<float> out(8, 0.0f);
  for (const TensorPiece& p : pieces)
    for (size_t i = 0; i < p.values.size(); ++i) out[static_cast<size_t>(p.offset[0] * 2) + i] = p.values[i];
  return out;
}

TEST_CASE("a node's collector writes a complete step on its own thread: add() returns while the disk is busy") {
  // The disk, as slow as the test likes: write n (1-based) begins, then
  // waits until the test has allowed n writes.
  std::atomic<int> started{0}, allowed{0};
  std::vector<std::pair<int64_t, std::vector<float>>> written;
  std::vector<NodeCheckpoint> reported;
  CheckpointCollector collector(
      two_piece_job(), kPieces,
      [&](int64_t step, std::vector<TensorPiece> pieces) -> StatusOr<NodeFile> {
        const int n = ++started;
        while (allowed.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        written.emplace_back(step, joined(pieces));
        return NodeFile{0, "node-0.safetensors", 64, {}};
      },
      [&](NodeCheckpoint c) { reported.push_back(std::move(c)); });
  auto wait_started = [&](int n) {
    for (int i = 0; i < 2000 && started.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(started.load() >= n);
  };
  collector.add(10, piece(0, 1.0f));
  collector.add(10, piece(2, 2.0f));  // step 10 complete: handed over, not written here
  wait_started(1);
  CHECK(collector.written() == 0);  // still writing, and add() returned
  // One more complete step may wait for the writer (kMaxWaiting).
  collector.add(20, piece(0, 3.0f));
  collector.add(20, piece(2, 4.0f));
  // The next waits for room: training slows to the disk's pace, and the
  // memory stays bounded.
  std::atomic<bool> third_done{false};
  std::thread third([&] {
    collector.add(30, piece(0, 5.0f));
    third_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(third_done.load());
  allowed = 1;  // step 10 written, step 20 taken: room
  third.join();
  collector.add(30, piece(2, 6.0f));
  allowed = 3;
  REQUIRE(collector.finish().ok());
  CHECK(collector.written() == 3);
  REQUIRE(written.size() == 3);
  REQUIRE(reported.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(written[i].first == static_cast<int64_t>(10 * (i + 1)));
    const float a = static_cast<float>(2 * i + 1), b = a + 1;
    CHECK(written[i].second == std::vector<float>{a, a, a, a, b, b, b, b});  // both pieces in place
    CHECK(reported[i].step == written[i].first);
    CHECK(reported[i].file.file == "node-0.safetensors");
  }
  // The third step's first piece waited about 200 ms for room: training's time on it.
  CHECK(reported[2].block_seconds > 0.1);
  CHECK(reported[0].block_seconds < reported[2].block_seconds);
}

TEST_CASE("a node's step whose pieces did not all arrive is an error at the end, naming what is missing") {
  int writes = 0;
  CheckpointCollector collector(
      two_piece_job(), kPieces,
      [&](int64_t, std::vector<TensorPiece>) -> StatusOr<NodeFile> {
        ++writes;
        return NodeFile{};
      },
      {});
  collector.add(10, piece(0, 1.0f));
  collector.add(10, piece(2, 1.0f));
  collector.add(20, piece(2, 2.0f));  // rows 0-1 of step 20's never come
  Status s = collector.finish();
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message().find("the checkpoint after step 20 was not written: 1 of this node's 2 pieces never arrived (w at "
                         "[0, 0])") != std::string::npos);
  CHECK(writes == 1);
  CHECK(collector.written() == 1);
}

TEST_CASE("a failed write is reported with its step and by finish()") {
  std::vector<NodeCheckpoint> reported;
  CheckpointCollector collector(
      two_piece_job(), kPieces,
      [](int64_t step, std::vector<TensorPiece>) -> StatusOr<NodeFile> {
        if (step == 2) return Status(Code::kUnavailable, "disk full at step 2");
        return NodeFile{};
      },
      [&](NodeCheckpoint c) { reported.push_back(std::move(c)); });
  for (int64_t step : {1, 2, 3}) {
    collector.add(step, piece(0, 1.0f));
    collector.add(step, piece(2, 1.0f));
  }
  Status s = collector.finish();
  CHECK(s.message().find("disk full at step 2") != std::string::npos);
  CHECK(collector.written() == 2);
  REQUIRE(reported.size() == 3);
  CHECK_FALSE(reported[1].status.ok());
}

// Node n writes rows 2n.. of w (and their momentum).
NodeCheckpoint file_of(int64_t step, int node, double block) {
  std::vector<TensorPiece> pieces = {TensorPiece{"w", {6, 2}, {2 * node, 0}, {2, 2}, DType::kF32, {}},
                                     TensorPiece{"w/momentum", {6, 2}, {2 * node, 0}, {2, 2}, DType::kF32, {}}};
  return NodeCheckpoint{step, {}, NodeFile{node, fmt::format("node-{}.safetensors", node), 100, pieces}, block, 0.5};
}

std::map<int, std::set<CheckpointCompleter::PieceKey>> writers(std::initializer_list<int> nodes) {
  std::map<int, std::set<CheckpointCompleter::PieceKey>> out;
  for (int n : nodes) out[n] = {{"w", {2 * n, 0}}};
  return out;
}

TEST_CASE("the master's completer makes a step complete once every writing node has reported, lowest step first") {
  std::vector<std::pair<int64_t, size_t>> metas;  // step, files
  std::vector<CheckpointRecord> told;
  CheckpointCompleter completer(
      writers({0, 2}),
      [&](int64_t step, const std::vector<NodeFile>& files) {
        metas.emplace_back(step, files.size());
        return Status();
      },
      [&](const CheckpointRecord& r) { told.push_back(r); });
  completer.add(2, file_of(10, 2, 0.01));
  completer.add(1, file_of(10, 1, 0.5));  // not a writer: ignored
  completer.add(0, file_of(20, 0, 0.02));
  completer.add(0, file_of(10, 0, 0.03));
  completer.add(2, file_of(20, 2, 0.04));
  REQUIRE(completer.finish().ok());
  REQUIRE(metas.size() == 2);
  CHECK(metas[0] == std::pair<int64_t, size_t>{10, 2});
  CHECK(metas[1] == std::pair<int64_t, size_t>{20, 2});
  REQUIRE(told.size() == 2);
  CHECK(told[0].bytes == 200);
  CHECK(told[0].block_seconds == 0.03);  // the longest any node waited
  CHECK(told[1].block_seconds == 0.04);
  CHECK(completer.written() == 2);
}

TEST_CASE("a step a node never reported, or a node's failed write, is the completer's error") {
  {
    CheckpointCompleter completer(writers({0, 1}), [](int64_t, const std::vector<NodeFile>&) { return Status(); });
    completer.add(0, file_of(10, 0, 0));
    Status s = completer.finish();
    CHECK(s.code() == Code::kDataLoss);
    CHECK(s.message().find("after step 10 was not written: node(s) 1 never reported their file") != std::string::npos);
  }
  {
    CheckpointCompleter completer(writers({0, 1}), [](int64_t, const std::vector<NodeFile>&) { return Status(); });
    NodeCheckpoint failed = file_of(10, 1, 0);
    failed.status = Status(Code::kUnavailable, "cannot write /ckpt/step-00000010/node-1.safetensors: disk full");
    completer.add(0, file_of(10, 0, 0));
    completer.add(1, std::move(failed));
    Status s = completer.finish();
    CHECK(s.message().find("node 1") != std::string::npos);
    CHECK(s.message().find("disk full") != std::string::npos);
    CHECK(completer.written() == 0);
  }
  {
    // A report of other pieces than the node writes (node 1 claiming node 0's).
    CheckpointCompleter completer(writers({0, 1}), [](int64_t, const std::vector<NodeFile>&) { return Status(); });
    completer.add(0, file_of(10, 0, 0));
    NodeCheckpoint claimed = file_of(10, 0, 0);
    completer.add(1, std::move(claimed));
    Status s = completer.finish();
    CHECK(s.code() == Code::kDataLoss);
    CHECK(s.message().find("node 1: its file of step 10 holds other variable pieces than the 1 it writes") !=
          std::string::npos);
    CHECK(completer.written() == 0);
  }
  {
    // A report listing far more pieces than the node writes.
    CheckpointCompleter completer(writers({0}), [](int64_t, const std::vector<NodeFile>&) { return Status(); });
    NodeCheckpoint flood = file_of(10, 0, 0);
    for (int i = 0; i < 100; ++i) flood.file.pieces.push_back(flood.file.pieces[1]);
    completer.add(0, std::move(flood));
    Status s = completer.finish();
    CHECK(s.message().find("lists 102 pieces, more than it writes") != std::string::npos);
  }
  {
    // A repeated report of a step already complete changes nothing.
    CheckpointCompleter completer(writers({0}), [](int64_t, const std::vector<NodeFile>&) { return Status(); });
    completer.add(0, file_of(10, 0, 0));
    completer.add(0, file_of(10, 0, 0));
    CHECK(completer.finish().ok());
    CHECK(completer.written() == 1);
  }
}

// A child process writes checkpoints (16 MiB each, every value its step) as
// fast as it can; the test kills it at random moments, 12 times. After
// each kill `latest` must name a complete checkpoint whose values are all its
// step, and the step never goes back.
TEST_CASE("a writer killed at any moment never leaves latest naming a partial checkpoint") {
  const fs::path root = fs::temp_directory_path() / ("rill-kill-write-" + std::to_string(::getpid()));
  fs::remove_all(root);
  std::mt19937 rng(7);
  int64_t step = 0;
  int found = 0;
  for (int round = 0; round < 12; ++round) {
    CAPTURE(round);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      Checkpoint c;
      c.job = "killed";
      c.tensors.push_back(CheckpointTensor{"w", {2048, 2048}, {}});
      for (int64_t s = step + 1;; ++s) {
        c.step = s;
        c.tensors[0].values.assign(size_t{1} << 22, static_cast<float>(s));
        if (!write_checkpoint(root.string(), c, 2).ok()) ::_exit(3);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 300));
    ::kill(child, SIGKILL);
    int wstatus = 0;
    ::waitpid(child, &wstatus, 0);
    CHECK(WIFSIGNALED(wstatus));  // killed mid-loop, never failed on its own
    auto latest = latest_checkpoint(root.string());
    if (!latest.ok()) {
      CHECK(latest.status().code() == Code::kNotFound);  // killed before its first write completed
      CHECK(step == 0);
      continue;
    }
    auto c = read_checkpoint(*latest);
    REQUIRE_MESSAGE(c.ok(), c.status().to_string());
    REQUIRE(c->tensors.size() == 1);
    bool all_step = true;
    for (float v : c->tensors[0].values) all_step = all_step && v == static_cast<float>(c->step);
    CHECK(all_step);
    CHECK(c->step >= step);
    step = c->step;
    ++found;
  }
  CHECK(found >= 9);
  int partial = 0;  // writes the kills cut short (each child's, left for the reader to ignore)
  for (const auto& entry : fs::directory_iterator(root)) partial += entry.path().filename().string().rfind(".tmp-", 0) == 0;
  MESSAGE(found, " kills after a complete checkpoint, ", partial, " of them mid-write; the last step ", step);
  fs::remove_all(root);
}

}  // namespace
}  // namespace rill
