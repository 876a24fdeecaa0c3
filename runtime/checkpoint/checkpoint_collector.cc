#include "runtime/checkpoint/checkpoint_collector.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/compiler.h"
#include "runtime/node/plan_reader.h"

namespace rill {

CheckpointCollector::CheckpointCollector(const graph::Job& job,
                                         const std::vector<compiler::VariablePieceOrigin>& pieces, Writer writer)
    : config_(job.checkpoint), job_name_(job.name), optimizer_(job.optimizer.type), writer_(std::move(writer)) {
  for (const compiler::VariablePieceOrigin& piece : pieces) expected_.insert({piece.name, piece.offset});
  for (const graph::Variable& v : job.variables) stored_[v.name] = is_float(v.dtype) ? config_.dtype : v.dtype;
  if (!writer_)
    writer_ = [dir = config_.dir, keep = static_cast<int>(config_.keep)](const Checkpoint& checkpoint) {
      return write_checkpoint(dir, checkpoint, keep);
    };
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

void CheckpointCollector::add(int64_t steps_done, VariablePiece piece, bool may_wait) {
  MutexLock lock(mu_);
  while (may_wait && complete_.size() >= kMaxWaiting && !stopping_) cv_.wait(mu_);
  // A replicated piece comes from every node that holds it; the first copy
  // of each completes the step, later ones are the same values.
  if (handed_over_.count(steps_done) != 0) return;
  Pieces& pieces = pending_[steps_done];
  PieceKey key{piece.name, piece.offset};
  pieces[key] = std::move(piece);
  if (pieces.size() < expected_.size()) return;
  complete_.emplace(steps_done, std::move(pieces));
  pending_.erase(steps_done);
  handed_over_.insert(steps_done);
  cv_.notify_all();
}

void CheckpointCollector::write_loop() {
  MutexLock lock(mu_);
  for (;;) {
    while (complete_.empty() && !stopping_) cv_.wait(mu_);
    if (complete_.empty()) return;  // stopping, with nothing left to write
    auto node = complete_.extract(complete_.begin());
    const int64_t steps_done = node.key();
    Pieces pieces = std::move(node.mapped());
    writing_ = true;
    cv_.notify_all();  // room for one more waiting step
    mu_.unlock();  // the disk is written without the lock
    Status written = writer_(assemble(steps_done, pieces));
    mu_.lock();
    writing_ = false;
    if (written.ok()) ++written_;
    else if (status_.ok()) status_ = written;
    cv_.notify_all();
  }
}

Checkpoint CheckpointCollector::assemble(int64_t steps_done, Pieces& pieces) const {
  // Assemble each logical tensor (and each optimizer state) from its pieces.
  std::map<std::string, CheckpointTensor> tensors;
  auto place = [&](const std::string& name, const VariablePiece& piece, std::vector<float>& values) {
    CheckpointTensor& t = tensors[name];
    t.name = name;
    place_piece(piece.logical_shape, piece.offset, piece.shape, values, &t.shape, &t.values);
  };
  for (auto& [key, piece] : pieces) {
    place(piece.name, piece, piece.values);
    // Optimizer state and the compiler's variables (loss scaling's) stay f32.
    if (auto it = stored_.find(piece.name); it != stored_.end()) tensors[piece.name].dtype = it->second;
    for (auto& [state_name, values] : piece.state) place(piece.name + "/" + state_name, piece, values);
  }
  Checkpoint checkpoint;
  checkpoint.step = steps_done;
  checkpoint.job = job_name_;
  checkpoint.metadata["optimizer"] = optimizer_;
  for (auto& [name, tensor] : tensors) checkpoint.tensors.push_back(std::move(tensor));
  return checkpoint;
}

Status CheckpointCollector::finish() {
  MutexLock lock(mu_);
  while (!complete_.empty() || writing_) cv_.wait(mu_);
  // Every node sends its snapshots before it reports the end of the run: a
  // step still missing pieces now lost them on the way.
  if (status_.ok() && !pending_.empty()) {
    const auto& [step, pieces] = *pending_.begin();
    std::vector<std::string> missing;
    for (const PieceKey& key : expected_)
      if (pieces.count(key) == 0) missing.push_back(fmt::format("{} at [{}]", key.first, fmt::join(key.second, ", ")));
    status_ = data_loss("the checkpoint after step {} was not written: {} of its {} pieces never arrived ({}{})", step,
                        missing.size(), expected_.size(),
                        fmt::join(missing.begin(), missing.begin() + std::min<size_t>(missing.size(), 4), "; "),
                        missing.size() > 4 ? "; ..." : "");
  }
  return status_;
}

int64_t CheckpointCollector::written() const {
  MutexLock lock(mu_);
  return written_;
}

}  // namespace rill
