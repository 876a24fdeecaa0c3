// Checkpoints off the training path: the collector hands a complete step to
// its own writer thread (training's add() waits for the disk only when the
// writer falls kMaxWaiting steps behind; the control loop's never), and a writer killed at any moment never
// leaves `latest` naming a partial checkpoint.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_collector.h"

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

const std::vector<compiler::VariablePieceOrigin> kPieces = {{"w", {0, 0}}, {"w", {2, 0}}};

VariablePiece piece(int64_t row, float value) {
  return VariablePiece{"w", {4, 2}, {row, 0}, {2, 2}, std::vector<float>(4, value), {}};
}

TEST_CASE("the collector writes a complete step on its own thread: add() returns while the disk is busy") {
  // The disk, as slow as the test likes: write n (1-based) begins, then
  // waits until the test has allowed n writes.
  std::atomic<int> started{0}, allowed{0};
  std::vector<Checkpoint> written;
  CheckpointCollector collector(two_piece_job(), kPieces, [&](const Checkpoint& c) {
    const int n = ++started;
    while (allowed.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    written.push_back(c);
    return Status();
  });
  auto wait_started = [&](int n) {
    for (int i = 0; i < 2000 && started.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(started.load() >= n);
  };
  collector.add(10, piece(0, 1.0f));
  collector.add(10, piece(2, 2.0f));  // step 10 complete: handed over, not written here
  for (int i = 0; i < 200 && started.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(started.load() == 1);
  CHECK(collector.written() == 0);  // still writing, and add() returned
  // The writer falls behind: kMaxWaiting more steps wait for it.
  collector.add(20, piece(0, 3.0f));
  collector.add(20, piece(2, 4.0f));
  collector.add(30, piece(0, 5.0f));
  collector.add(30, piece(2, 6.0f));
  // Another node's piece, stored by the master's control loop: at once,
  // however far behind the disk is (the loop sends the heartbeats).
  const auto before = std::chrono::steady_clock::now();
  collector.add(40, piece(2, 8.0f), /*may_wait=*/false);
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::milliseconds(100));
  // The master's own piece, from training: it waits for room (training
  // slows to the disk's pace; the memory stays bounded).
  std::atomic<bool> fourth_done{false};
  std::thread fourth([&] {
    collector.add(40, piece(0, 7.0f));
    fourth_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(fourth_done.load());
  // A whole step from the control loop is handed over without waiting too.
  collector.add(50, piece(0, 9.0f), false);
  collector.add(50, piece(2, 10.0f), false);
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::milliseconds(400));
  // Step 10 written, then step 20 taken: 30 and 50 still wait, no room yet.
  allowed = 1;
  wait_started(2);
  CHECK_FALSE(fourth_done.load());
  // Step 20 written, step 30 taken: room for the training's step 40, which
  // is complete before the writer chooses again (it is held in step 30's
  // write until the test has seen step 40 go in).
  allowed = 2;
  wait_started(3);
  fourth.join();
  allowed = 5;
  REQUIRE(collector.finish().ok());
  CHECK(collector.written() == 5);
  REQUIRE(written.size() == 5);
  // Lowest step first: step 50, handed over while training waited for room
  // with step 40, is written after it.
  CHECK(written[4].step == 50);
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(written[i].step == static_cast<int64_t>(10 * (i + 1)));
    REQUIRE(written[i].tensors.size() == 1);
    const float a = static_cast<float>(2 * i + 1), b = a + 1;
    CHECK(written[i].tensors[0].values == std::vector<float>{a, a, a, a, b, b, b, b});  // both pieces in place
  }
}

TEST_CASE("a checkpoint whose pieces did not all arrive is an error at the end, naming what is missing") {
  int writes = 0;
  CheckpointCollector collector(two_piece_job(), kPieces, [&](const Checkpoint&) {
    ++writes;
    return Status();
  });
  collector.add(10, piece(0, 1.0f));
  collector.add(10, piece(2, 1.0f));
  collector.add(10, piece(2, 1.0f));  // a replica of a piece, from another node: the step is written already
  collector.add(20, piece(2, 2.0f));  // rows 0-1 of step 20's never come (a lost control message)
  Status s = collector.finish();
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message().find("the checkpoint after step 20 was not written: 1 of its 2 pieces never arrived (w at [0, 0])") !=
        std::string::npos);
  CHECK(writes == 1);
  CHECK(collector.written() == 1);
}

TEST_CASE("a failed checkpoint write is reported by finish(), naming it") {
  CheckpointCollector collector(two_piece_job(), kPieces, [](const Checkpoint& c) {
    return c.step == 2 ? Status(Code::kUnavailable, "disk full at step 2") : Status();
  });
  for (int64_t step : {1, 2, 3}) {
    collector.add(step, piece(0, 1.0f));
    collector.add(step, piece(2, 1.0f));
  }
  Status s = collector.finish();
  CHECK(s.message().find("disk full at step 2") != std::string::npos);
  CHECK(collector.written() == 2);
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
