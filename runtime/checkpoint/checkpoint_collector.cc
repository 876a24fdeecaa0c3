#include "runtime/checkpoint/checkpoint_collector.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace rill {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

CheckpointCollector::CheckpointCollector(const graph::Job& job, std::vector<SnapshotPiece> pieces, Writer writer,
                                         Report report)
    : writer_(std::move(writer)), report_(std::move(report)) {
  for (SnapshotPiece& piece : pieces) expected_.insert({std::move(piece.name), std::move(piece.offset)});
  for (const graph::Variable& v : job.variables)
    stored_[v.name] = is_float(v.dtype) ? job.checkpoint.dtype : v.dtype;
  thread_ = std::thread([this] { write_loop(); });
}

CheckpointCollector::~CheckpointCollector() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointCollector::add(int64_t steps_done, VariablePiece piece) {
  const auto start = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  while (complete_.size() >= kMaxWaiting && !stopping_ && !abandoned_) cv_.wait(mu_);
  PieceKey key{piece.name, piece.offset};
  if (handed_over_.count(steps_done) != 0 || expected_.count(key) == 0) return;  // not a piece this node writes
  if (abandoned_) {
    dropped_.insert(steps_done);
    return;
  }
  if (const double waited = seconds_since(start); waited > kWarnWaitSeconds && !warned_) {
    warned_ = true;
    spdlog::warn("the checkpoint after step {} waited {:.1f} s for the disk, and training with it: checkpoints come "
                 "faster than the disk writes them; a larger checkpoint.every, or a faster checkpoint.dir, lets "
                 "training go on while they are written",
                 steps_done, waited);
  }
  Step& step = pending_[steps_done];
  step.block_seconds += piece.copy_seconds + seconds_since(start);
  step.pieces[key] = std::move(piece);
  if (step.pieces.size() < expected_.size()) return;
  complete_.emplace(steps_done, std::move(step));
  pending_.erase(steps_done);
  handed_over_.insert(steps_done);
  cv_.notify_all();
}

void CheckpointCollector::abandon() {
  {
    MutexLock lock(mu_);
    abandoned_ = true;
  }
  cv_.notify_all();
}

void CheckpointCollector::write_loop() {
  MutexLock lock(mu_);
  for (;;) {
    while (complete_.empty() && !stopping_) cv_.wait(mu_);
    if (complete_.empty()) return;  // stopping, with nothing left to write
    auto node = complete_.extract(complete_.begin());
    NodeCheckpoint done{node.key(), {}, {}, node.mapped().block_seconds, 0};
    Step step = std::move(node.mapped());
    writing_ = true;
    cv_.notify_all();  // room for one more waiting step
    mu_.unlock();      // the disk is written without the lock
    const auto start = std::chrono::steady_clock::now();
    auto written = writer_(done.step, tensors(step));
    done.write_seconds = seconds_since(start);
    if (written.ok()) done.file = std::move(*written);
    else done.status = written.status();
    const Status status = done.status;
    if (report_) report_(std::move(done));
    mu_.lock();
    writing_ = false;
    if (status.ok()) ++written_;
    else if (status_.ok()) status_ = status;
    cv_.notify_all();
  }
}

// Each piece as the tensors a checkpoint stores: the variable's block in its
// stored dtype, then each optimizer state's (f32).
std::vector<TensorPiece> CheckpointCollector::tensors(Step& step) const {
  std::vector<TensorPiece> out;
  for (auto& [key, piece] : step.pieces) {
    auto stored = stored_.find(piece.name);
    // Optimizer state and the compiler's variables (loss scaling's) stay f32.
    out.push_back(TensorPiece{piece.name, piece.logical_shape, piece.offset, piece.shape,
                              stored != stored_.end() ? stored->second : DType::kF32, std::move(piece.values)});
    for (auto& [state_name, values] : piece.state)
      out.push_back(TensorPiece{piece.name + "/" + state_name, piece.logical_shape, piece.offset, piece.shape,
                                DType::kF32, std::move(values), /*optimizer_state=*/true});
  }
  return out;
}

Status CheckpointCollector::finish() {
  MutexLock lock(mu_);
  while (!complete_.empty() || writing_) cv_.wait(mu_);
  if (status_.ok() && !dropped_.empty())
    status_ = Status(Code::kAborted, fmt::format("the run stopped: the checkpoint after step(s) {} was not written",
                                                 fmt::join(dropped_, ", ")));
  // The node's variables hand over their pieces before its run ends: a step
  // still missing pieces now lost them.
  if (status_.ok() && !pending_.empty()) {
    const auto& [step, pieces] = *pending_.begin();
    std::vector<std::string> missing;
    for (const PieceKey& key : expected_)
      if (pieces.pieces.count(key) == 0)
        missing.push_back(fmt::format("{} at [{}]", key.first, fmt::join(key.second, ", ")));
    status_ = data_loss("the checkpoint after step {} was not written: {} of this node's {} pieces never arrived ({}{})",
                        step, missing.size(), expected_.size(),
                        fmt::join(missing.begin(), missing.begin() + std::min<size_t>(missing.size(), 4), "; "),
                        missing.size() > 4 ? "; ..." : "");
  }
  return status_;
}

int64_t CheckpointCollector::written() const {
  MutexLock lock(mu_);
  return written_;
}

CheckpointCollector::Writer node_file_writer(const graph::Job& job, int node, int nodes, FileAccess access,
                                             WriteProgress* progress, double delay_s) {
  return [dir = job.checkpoint.dir, node, nodes, access = std::move(access), progress, delay_s,
          optimizer = job.optimizer.type](int64_t step, std::vector<TensorPiece> tensors) {
    progress->begin(step);
    struct Ended {  // also when the write throws
      WriteProgress* progress;
      ~Ended() { progress->end(); }
    } ended{progress};
    uint64_t told = 0;
    auto observe = [&](uint64_t done, uint64_t total) {
      progress->update(done, total);
      if (delay_s > 0 && total > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(delay_s * static_cast<double>(done - told) /
                                                                  static_cast<double>(total)));
      told = done;
    };
    return write_node_file(dir, step, node, nodes, std::move(tensors), access, {{"optimizer", optimizer}}, observe);
  };
}

}  // namespace rill
