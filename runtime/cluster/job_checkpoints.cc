#include "runtime/cluster/job_checkpoints.h"

#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_pieces.h"
#include "runtime/node/carried_state.h"

namespace rill {

std::string checkpoint_metrics_line(const CheckpointRecord& record) {
  nlohmann::ordered_json j;
  j["checkpoint"] = record.step;
  j["files"] = record.files;
  j["bytes"] = record.bytes;
  j["block_ms"] = 1e3 * record.block_seconds;
  j["write_ms"] = 1e3 * record.write_seconds;
  return j.dump();
}

StatusOr<std::unique_ptr<JobCheckpoints>> JobCheckpoints::make(const graph::Job& job, const compiler::Cluster& cluster,
                                                               std::string_view node0_plan,
                                                               const JobRunOptions& options, int64_t start_step,
                                                               std::FILE* metrics) {
  const graph::CheckpointConfig& config = job.checkpoint;
  RILL_RETURN_IF_ERROR(check_checkpoint_dir(config.dir, options.checkpoint_access));
  // A run going on from memory continues its own checkpoints.
  if (options.start_from_memory < 0)
    RILL_RETURN_IF_ERROR(claim_checkpoint_dir(config.dir, options.resume, config.overwrite));
  // What an earlier run (or attempt) left after where this one starts, whole
  // or not, is written again by this one.
  RILL_RETURN_IF_ERROR(drop_steps_after(config.dir, start_step));
  RILL_ASSIGN_OR_RETURN(auto pieces, compiler::variable_pieces(job, cluster));
  std::map<int, std::set<CheckpointCompleter::PieceKey>> writers;  // what each node writes
  for (const compiler::VariablePieceOrigin& piece : pieces) writers[piece.writer].insert({piece.name, piece.offset});
  RILL_ASSIGN_OR_RETURN(std::vector<SnapshotPiece> own, snapshot_pieces(node0_plan));
  // Node 0's carried state (its compressed all-reduces'); the other nodes'
  // come with their acks of the plan (attach).
  for (const SnapshotPiece& piece : own)
    if (piece.name.starts_with(kCarriedPrefix)) writers[0].insert({piece.name, piece.offset});
  std::unique_ptr<JobCheckpoints> out(new JobCheckpoints());
  out->every_ = config.every;
  if (options.write_progress) out->progress_ = options.write_progress;
  out->completer_.emplace(
      std::move(writers),
      [dir = config.dir, keep = static_cast<int>(config.keep), access = options.checkpoint_access, job = job.name,
       optimizer = job.optimizer.type](int64_t step, const std::vector<NodeFile>& files) {
        return write_step_meta(dir, step, job, optimizer, files, keep, access);
      },
      [metrics](const CheckpointRecord& record) {
        // One fwrite: whole against the step lines the sink's thread writes.
        if (metrics) fmt::print(metrics, "{}\n", checkpoint_metrics_line(record)), std::fflush(metrics);
      });
  if (!own.empty())
    out->collector_.emplace(
        job, std::move(own),
        node_file_writer(job, 0, cluster.num_nodes, options.checkpoint_access, out->progress_,
                         options.checkpoint_write_delay_s),
        [completer = &*out->completer_](NodeCheckpoint written) { completer->add(0, std::move(written)); });
  return out;
}

void JobCheckpoints::attach(RunOptions& run, PhasePlan& phase) {
  run.snapshot_every = every_;
  // Training waits for node 0's disk where it is slower than the
  // checkpoints: its writes going on are not a stall.
  if (!run.liveness) run.liveness = [progress = progress_] { return static_cast<uint64_t>(progress->bytes()); };
  run.describe_liveness = [progress = progress_] { return progress->describe(); };
  // Every node snapshots (the master tells the others with their part);
  // node 0 may hold nothing to write (a pserver layout's trainer).
  run.on_snapshot = [this](int64_t done, VariablePiece piece) {
    if (collector_) collector_->add(done, std::move(piece));
  };
  run.on_abort = [this] {
    if (collector_) collector_->abandon();
  };
  phase.on_checkpoint = [this](int node, NodeCheckpoint written) { completer_->add(node, std::move(written)); };
  phase.expect_carried = [this](int node, const std::vector<CheckpointCompleter::PieceKey>& pieces) {
    return completer_->expect_carried(node, pieces);
  };
}

Status JobCheckpoints::finish() {
  Status own = collector_ ? collector_->finish() : Status();
  Status all = completer_->finish();
  return own.ok() ? all : own;
}

}  // namespace rill
