#include "runtime/checkpoint_collector.h"

#include "compiler/compiler.h"
#include "runtime/checkpoint.h"
#include "runtime/plan_reader.h"

namespace rill {

CheckpointCollector::CheckpointCollector(const graph::Job& job,
                                         const std::vector<compiler::VariablePieceOrigin>& pieces)
    : config_(job.checkpoint), job_name_(job.name), optimizer_(job.optimizer.type) {
  for (const compiler::VariablePieceOrigin& piece : pieces) expected_.insert({piece.name, piece.offset});
}

void CheckpointCollector::add(int64_t steps_done, VariablePiece piece) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& pieces = pending_[steps_done];
  PieceKey key{piece.name, piece.offset};
  pieces[key] = std::move(piece);
  if (pieces.size() < expected_.size()) return;
  Status written = write(steps_done, pieces);
  if (written.ok()) ++written_;
  else if (status_.ok()) status_ = written;
  pending_.erase(steps_done);
}

Status CheckpointCollector::write(int64_t steps_done, std::map<PieceKey, VariablePiece>& pieces) {
  // Assemble each logical tensor (and each optimizer state) from its pieces.
  std::map<std::string, CheckpointTensor> tensors;
  auto place = [&](const std::string& name, const VariablePiece& piece, std::vector<float>& values) {
    CheckpointTensor& t = tensors[name];
    if (t.values.empty()) {
      t.name = name;
      t.shape = piece.logical_shape;
      t.values.assign(static_cast<size_t>(num_elements(piece.logical_shape)), 0.0f);
    }
    copy_block(piece.logical_shape, piece.offset, piece.shape, t.values.data(), values.data(), false);
  };
  for (auto& [key, piece] : pieces) {
    place(piece.name, piece, piece.values);
    for (auto& [state_name, values] : piece.state) place(piece.name + "/" + state_name, piece, values);
  }
  Checkpoint checkpoint;
  checkpoint.step = steps_done;
  checkpoint.job = job_name_;
  checkpoint.metadata["optimizer"] = optimizer_;
  for (auto& [name, tensor] : tensors) checkpoint.tensors.push_back(std::move(tensor));
  return write_checkpoint(config_.dir, checkpoint, config_.keep);
}

Status CheckpointCollector::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

int64_t CheckpointCollector::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

}  // namespace rill
