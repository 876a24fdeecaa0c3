// Checkpoints off the training path: a node's collector hands a complete
// step to its own writer thread (training's add() waits for the disk only
// when the writer falls kMaxWaiting steps behind), the master's completer
// makes a step complete once every writing node's file is there, and a
// writer killed at any moment, mid-write included, never leaves `latest`
// naming a partial checkpoint.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_collector.h"
#include "runtime/checkpoint/checkpoint_completer.h"
#include "runtime/checkpoint/checkpoint_io.h"
#include "runtime/node/carried_state.h"
#include "runtime/checkpoint/checkpoint_pieces.h"
#include "tests/runtime/stop_child.h"

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

// A file goes to the kernel by chunks of 256 KiB, each told to the
// observer (written back by windows of 1 MiB as it grows): a 3 MB variable
// with its 3 MB momentum is heard of 20 times or more, in order, from 0 to
// the file's size. A node's writer counts them in its
// WriteProgress, whose bytes() only grow across steps, and which names
// the step while it is written.
TEST_CASE("a node's writer tells the bytes of its file as they are written") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("rill-write-progress-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<float> values(750000, 1.5f);
  std::vector<std::pair<uint64_t, uint64_t>> told;
  REQUIRE(checkpoint_io::write_file_synced((dir / "raw").string(),
                                           {{values.data(), 3000000}, {values.data(), 3000000}},
                                           [&](uint64_t done, uint64_t total) { told.emplace_back(done, total); })
              .ok());
  REQUIRE(told.size() >= 20);
  CHECK(told.front() == std::pair<uint64_t, uint64_t>{0, 6000000});  // its size first
  for (size_t i = 1; i < told.size(); ++i) CHECK(told[i].first > told[i - 1].first);
  CHECK(told.back() == std::pair<uint64_t, uint64_t>{6000000, 6000000});
  CHECK(fs::file_size(dir / "raw") == 6000000);

  graph::Job job = two_piece_job();
  job.checkpoint.dir = (dir / "ckpt").string();
  job.optimizer.type = "momentum";
  WriteProgress progress;
  auto write = node_file_writer(job, 1, 2, FileAccess{}, &progress);
  auto pieces = [&](float value) {
    const int64_t n = static_cast<int64_t>(values.size());
    std::vector<TensorPiece> out;
    out.push_back(TensorPiece{"w", {n}, {0}, {n}, DType::kF32, std::vector<float>(values.size(), value)});
    out.push_back(TensorPiece{"w/momentum", {n}, {0}, {n}, DType::kF32, values, true});
    return out;
  };
  auto first = write(10, pieces(1.0f));
  REQUIRE_MESSAGE(first.ok(), first.status().to_string());
  CHECK(first->bytes > 6000000);
  CHECK(progress.bytes() == first->bytes);
  CHECK(progress.step() == -1);  // the write ended
  CHECK(progress.describe().empty());
  auto second = write(20, pieces(2.0f));
  REQUIRE(second.ok());
  CHECK(progress.bytes() == first->bytes + second->bytes);

  WriteProgress under_way;
  under_way.begin(30);
  under_way.update(1200000, 4800000);
  CHECK(under_way.describe().starts_with("the checkpoint of step 30: 1.2 of 4.8 MB written, the last "));
  CHECK(under_way.step() == 30);
  fs::remove_all(dir);
}

// A run that stops while training waits for the disk: abandon() lets the
// waiting add() go at once without its piece; the steps handed to the
// writer are still written (a restart may resume from them), and finish()
// names the step that was not.
TEST_CASE("an abandoned collector lets a waiting snapshot go and still writes what was handed over") {
  std::atomic<int> started{0}, allowed{0};
  std::vector<int64_t> written;
  CheckpointCollector collector(
      two_piece_job(), kPieces,
      [&](int64_t step, std::vector<TensorPiece>) -> StatusOr<NodeFile> {
        const int n = ++started;
        for (int i = 0; i < 10000 && allowed.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        written.push_back(step);
        return NodeFile{0, "node-0.safetensors", 64, {}};
      },
      {});
  collector.add(10, piece(0, 1.0f));
  collector.add(10, piece(2, 2.0f));
  for (int i = 0; i < 2000 && started.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(started.load() == 1);
  collector.add(20, piece(0, 3.0f));
  collector.add(20, piece(2, 4.0f));  // waits for the writer
  std::atomic<bool> returned{false};
  std::thread third([&] {
    collector.add(30, piece(0, 5.0f));  // waits for room
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(returned.load());
  collector.abandon();
  third.join();  // at once, the disk still busy
  CHECK(started.load() == 1);
  collector.add(30, piece(2, 6.0f));  // after the stop: refused too
  collector.add(40, VariablePiece{"v", {4, 2}, {0, 0}, {2, 2}, std::vector<float>(4, 0.0f), {}});  // not this node's
  allowed = 10;
  const Status end = collector.finish();  // what was not written is said, not hidden
  CHECK(end.code() == Code::kAborted);
  CHECK(end.message().find("the checkpoint after step(s) 30 was not written") != std::string::npos);
  CHECK(written == std::vector<int64_t>{10, 20});
  CHECK(collector.written() == 2);
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

// A node that writes no variable piece but a compressed all-reduce's
// carried state (its row of the error) is expected once its ack of the plan
// says so: the step waits for its file, and a file of the others' pieces
// is still refused.
TEST_CASE("carried state a node's ack lists makes it a writer the step waits for") {
  const std::string error = std::string(kCarriedPrefix) + "bucket:grad/w:P->B/bf16_error";
  auto carried_file = [&](int64_t step, int node) {
    return NodeCheckpoint{step, {}, NodeFile{node, fmt::format("node-{}.safetensors", node), 10,
                                             {TensorPiece{error, {3, 4}, {node, 0}, {1, 4}, DType::kF32, {}}}},
                          0, 0};
  };
  std::vector<size_t> metas;
  CheckpointCompleter completer(writers({0}), [&](int64_t, const std::vector<NodeFile>& files) {
    metas.push_back(files.size());
    return Status();
  });
  CHECK(completer.expect_carried(1, {{error, {1, 0}}}).ok());
  completer.add(0, file_of(10, 0, 0));
  CHECK(completer.finish().code() == Code::kDataLoss);  // node 1's file of step 10 never came
  CheckpointCompleter second(writers({0}), [&](int64_t, const std::vector<NodeFile>& files) {
    metas.push_back(files.size());
    return Status();
  });
  CHECK(second.expect_carried(1, {{error, {1, 0}}}).ok());
  second.add(0, file_of(10, 0, 0));
  second.add(1, carried_file(10, 1));
  CHECK(second.finish().ok());
  CHECK(metas == std::vector<size_t>{2});
  // Only carried state, and not more of it than two pieces a variable.
  CHECK(second.expect_carried(2, {{"w", {0, 0}}}).code() == Code::kDataLoss);
  CHECK(second.expect_carried(2, {{std::string(kCarriedPrefix) + "b/other", {0}}}).code() == Code::kDataLoss);
  CHECK(second.expect_carried(2, {{error, {0, 0}}, {error, {1, 0}}, {error, {2, 0}}}).code() == Code::kDataLoss);
}

// A checkpoint of `step`: four tensors of 4 MiB, every value the step, so
// that its model.safetensors is written in 6 write()s (length, header,
// tensors).
Checkpoint four_tensors(int64_t step) {
  Checkpoint c;
  c.job = "killed";
  c.step = step;
  for (int i = 0; i < 4; ++i)
    c.tensors.push_back(CheckpointTensor{fmt::format("w{}", i), {1024, 1024},
                                         std::vector<float>(size_t{1} << 20, static_cast<float>(step))});
  return c;
}

// A step's model.safetensors, partly written, as a stopped writer left it.
struct MidWrite {
  int64_t step = -1;
  fs::path file;
  uintmax_t bytes = 0;
};

// The model.safetensors in the temporary folder process `pid` writes a step
// in, if it holds more than nothing and less than the whole file of `whole`
// bytes; of step 2 on, so that a complete step comes before it.
std::optional<MidWrite> mid_write(const fs::path& root, pid_t pid, uintmax_t whole) {
  std::error_code ec;
  const std::string suffix = fmt::format("-{}", pid);
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp-step-", 0) != 0 || !name.ends_with(suffix)) continue;
    const fs::path file = entry.path() / "model.safetensors";
    const uintmax_t bytes = fs::file_size(file, ec);
    const int64_t step = std::stoll(name.substr(10));
    if (ec || bytes == 0 || bytes >= whole || step < 2) continue;
    return MidWrite{step, file, bytes};
  }
  return std::nullopt;
}

// A child process writes checkpoints (16 MiB each, every value its step) as
// fast as it can. In even rounds the test kills it at a random moment; in
// odd ones it stops the child at random moments until its model.safetensors
// is partly written in its temporary folder, and kills it there. After each
// kill `latest` must name a complete checkpoint whose values are all its
// step, and the step never goes back; after a kill mid-write the step being
// written is nowhere a resume looks, and the one before it reads back whole.
TEST_CASE("a writer killed at any moment, mid-write included, never leaves latest naming a partial checkpoint") {
  const fs::path root = fs::temp_directory_path() / ("rill-kill-write-" + std::to_string(::getpid()));
  fs::remove_all(root);
  REQUIRE(write_checkpoint((root / "size").string(), four_tensors(0), 1).ok());
  const uintmax_t whole = fs::file_size(root / "size" / checkpoint_step_name(0) / "model.safetensors");
  fs::remove_all(root);
  std::mt19937 rng(7);
  int64_t step = 0;
  int found = 0, mid_writes = 0;
  for (int round = 0; round < 12; ++round) {
    CAPTURE(round);
    // A run going on from `step`: what the last child installed after it
    // (a step whose `latest` never moved) goes.
    if (fs::exists(root)) REQUIRE(drop_steps_after(root.string(), step).ok());
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (int64_t s = step + 1;; ++s)
        if (!write_checkpoint(root.string(), four_tensors(s), 2).ok()) ::_exit(3);
    }
    std::optional<MidWrite> cut;
    if (round % 2 == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 300));
    } else {
      int status = 0;
      const testing::Stopped stopped = testing::stop_where(
          child, rng, 5000, 4000, [&] { return (cut = mid_write(root, child, whole)).has_value(); }, &status);
      if (stopped == testing::Stopped::kEnded) FAIL("the writer ended on its own, status ", status);
      if (stopped == testing::Stopped::kMissed) testing::kill_child(child);
      REQUIRE_MESSAGE(stopped == testing::Stopped::kLanded, "never stopped while model.safetensors was partly written");
    }
    const int wstatus = testing::kill_child(child);
    CHECK(WIFSIGNALED(wstatus));  // killed mid-loop, never failed on its own
    if (cut) {
      ++mid_writes;
      CAPTURE(cut->file);
      // The kill found the file as the stop did: partly written, its folder
      // not yet renamed into place.
      CHECK(fs::file_size(cut->file) == cut->bytes);
      CHECK_FALSE(fs::exists(root / checkpoint_step_name(cut->step)));
      const std::vector<int64_t> steps = checkpoint_steps(root.string());
      CHECK(std::find(steps.begin(), steps.end(), cut->step) == steps.end());
      REQUIRE_FALSE(steps.empty());
      CHECK(steps.back() == cut->step - 1);
    }
    auto latest = latest_checkpoint(root.string());
    if (!latest.ok()) {
      CHECK(latest.status().code() == Code::kNotFound);  // killed before its first write completed
      CHECK(step == 0);
      CHECK_FALSE(cut.has_value());  // a step before the cut one is complete
      continue;
    }
    auto c = read_checkpoint(*latest);
    REQUIRE_MESSAGE(c.ok(), c.status().to_string());
    REQUIRE(c->tensors.size() == 4);
    bool all_step = true;
    for (const CheckpointTensor& t : c->tensors)
      for (float v : t.values) all_step = all_step && v == static_cast<float>(c->step);
    CHECK(all_step);
    CHECK(c->step >= step);
    if (cut) CHECK(c->step == cut->step - 1);
    step = c->step;
    ++found;
  }
  CHECK(found >= 9);
  CHECK(mid_writes == 6);
  MESSAGE(found, " kills after a complete checkpoint, ", mid_writes, " of them mid-write; the last step ", step);
  fs::remove_all(root);
}

}  // namespace
}  // namespace rill
