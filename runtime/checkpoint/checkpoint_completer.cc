#include "runtime/checkpoint/checkpoint_completer.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/printable.h"
#include "runtime/node/carried_state.h"

namespace rill {

CheckpointCompleter::CheckpointCompleter(std::map<int, std::set<PieceKey>> expected, MetaWriter write,
                                         OnComplete on_complete)
    : expected_(std::move(expected)), write_(std::move(write)), on_complete_(std::move(on_complete)) {
  for (const auto& [node, pieces] : expected_)
    for (const PieceKey& piece : pieces) variable_names_.insert(piece.first);
  thread_ = std::thread([this] { write_loop(); });
}

Status CheckpointCompleter::expect_carried(int node, const std::vector<PieceKey>& pieces) {
  if (pieces.size() > 2 * std::max<size_t>(variable_names_.size(), 1))
    return data_loss("its plan lists {} pieces of carried state for checkpoints, more than two per variable ({})",
                     pieces.size(), variable_names_.size());
  for (const PieceKey& piece : pieces)
    if (!piece.first.starts_with(kCarriedPrefix) || piece.first.size() > 4096 ||
        !(piece.first.ends_with("_error") || piece.first.ends_with("_q")))
      return data_loss("its plan lists '{}' as carried state for checkpoints; carried state is named {}...",
                       printable_name(piece.first.substr(0, 64)), kCarriedPrefix);
  if (pieces.empty()) return {};
  MutexLock lock(mu_);
  // Not among variable_names_: no piece is carried state's optimizer state.
  for (const PieceKey& piece : pieces) expected_[node].insert(piece);
  return {};
}

CheckpointCompleter::~CheckpointCompleter() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointCompleter::add(int node, NodeCheckpoint written) {
  MutexLock lock(mu_);
  const auto expected = expected_.find(node);
  // A variable's pieces and at most a few states of each: a report of more
  // is nothing a node writes (and would make the tiling check slow).
  if (written.status.ok() && expected != expected_.end() &&
      written.file.pieces.size() > kMaxStatesPerPiece * std::max<size_t>(expected->second.size(), 1))
    written.status = data_loss("its file of step {} lists {} pieces, more than it writes", written.step,
                               written.file.pieces.size());
  if (written.status.ok() && expected != expected_.end()) {
    // The variables' pieces it says it wrote are the ones it writes.
    // An optimizer state is "<variable>/<state>"; any other piece counts.
    std::set<PieceKey> variables;
    for (const TensorPiece& p : written.file.pieces) {
      const size_t slash = p.tensor.rfind('/');
      if (slash == std::string::npos || variable_names_.count(p.tensor.substr(0, slash)) == 0)
        variables.insert({p.tensor, p.offset});
    }
    if (variables != expected->second)
      written.status = data_loss("its file of step {} holds other variable pieces than the {} it writes ({} of them)",
                                 written.step, expected->second.size(), variables.size());
  }
  if (!written.status.ok()) {
    if (status_.ok()) status_ = written.status.with_context(fmt::format("node {}", node));
    pending_.erase(written.step);  // this step will not be complete
    cv_.notify_all();
    return;
  }
  if (expected == expected_.end() || complete_.count(written.step) != 0 || done_.count(written.step) != 0) return;
  Step& step = pending_[written.step];
  const int64_t at = written.step;
  step.files.try_emplace(node, std::move(written));  // a repeated report changes nothing
  if (step.files.size() < expected_.size()) return;
  complete_.emplace(at, std::move(step));
  pending_.erase(at);
  done_.insert(at);
  cv_.notify_all();
}

void CheckpointCompleter::write_loop() {
  MutexLock lock(mu_);
  for (;;) {
    while (complete_.empty() && !stopping_) cv_.wait(mu_);
    if (complete_.empty()) return;
    auto node = complete_.extract(complete_.begin());
    const int64_t step = node.key();
    CheckpointRecord record{step, 0, 0, 0, 0};
    std::vector<NodeFile> files;
    for (auto& [n, written] : node.mapped().files) {
      ++record.files;
      record.bytes += std::clamp<int64_t>(written.file.bytes, 0, int64_t{1} << 50);
      record.block_seconds = std::max(record.block_seconds, written.block_seconds);
      record.write_seconds = std::max(record.write_seconds, written.write_seconds);
      files.push_back(std::move(written.file));
    }
    writing_ = true;
    mu_.unlock();
    Status status = write_(step, files);
    if (status.ok() && on_complete_) on_complete_(record);
    mu_.lock();
    writing_ = false;
    if (status.ok()) records_.push_back(record);
    else if (status_.ok()) status_ = status;
    cv_.notify_all();
  }
}

Status CheckpointCompleter::finish() {
  MutexLock lock(mu_);
  while (!complete_.empty() || writing_) cv_.wait(mu_);
  if (status_.ok() && !pending_.empty()) {
    const auto& [step, pending] = *pending_.begin();
    std::vector<int> missing;
    for (const auto& [node, pieces] : expected_)
      if (pending.files.count(node) == 0) missing.push_back(node);
    status_ = data_loss("the checkpoint after step {} was not written: node(s) {} never reported their file", step,
                        fmt::join(missing, ", "));
  }
  return status_;
}

int64_t CheckpointCompleter::written() const {
  MutexLock lock(mu_);
  return static_cast<int64_t>(records_.size());
}

std::vector<CheckpointRecord> CheckpointCompleter::records() const {
  MutexLock lock(mu_);
  return records_;
}

}  // namespace rill
