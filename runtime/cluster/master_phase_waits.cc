// The master's waits within a phase and its agreed end: stopping every
// node at one step (actor/run_end.h), and waiting for the nodes' Dones or
// for the whole cluster to be up again.
#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "runtime/cluster/master.h"

namespace rill::agent_internal {

void Master::begin_stop_locked() {
  // Before the phase runs, execute_phase begins it after its Start.
  if (!phase_.held.empty() || !local_runtime_) return;
  phase_.held[0] = local_runtime_->hold();
  for (int r : phase_.members)
    if (r != 0) post_to_node(r, ctl::Hold{phase_.job_id, phase_.phase});
  end_when_held_locked();
}

void Master::end_when_held_locked() {
  if (phase_.end >= 0 || phase_.held.size() < phase_.members.size()) return;
  int64_t last = phase_.first_step - 1;
  for (const auto& [node, begun] : phase_.held) last = std::max(last, begun);
  phase_.end = RunEnd::agreed_end(phase_.first_step, phase_.plan_steps, last);
  // A phase that ends to take a node back, whose nodes copy their pieces
  // every K steps, ends at a multiple of K: every node holds its own pieces
  // of that step, which node 0 gathers for the next attempt (master_gather.cc).
  if (const int64_t k = phase_.replica_every; k > 0 && regroup_ && !stop_job_)
    phase_.end = std::min(phase_.plan_steps, (phase_.end + k - 1) / k * k);
  spdlog::warn("job {} phase {}: every node stops at step {}", phase_.job_id, phase_.phase, phase_.end);
  for (int r : phase_.members)
    if (r != 0) post_to_node(r, ctl::EndAt{phase_.job_id, phase_.phase, phase_.end});
  if (local_runtime_) local_runtime_->end_at(phase_.end);
}

bool Master::wait_phase_until(Clock::time_point deadline) {
  if (now() >= deadline) return false;
  // On the agent's clock, which may not be steady time (a test's): woken by
  // a notification, or to look at the clock again.
  const auto wake = Clock::now() + std::chrono::milliseconds(20);
  (void)phase_cv_.wait_until(phase_mu_, std::min(wake, Clock::now() + (deadline - now())));
  return true;
}

void Master::end_checkpoint_reports() {
  MutexLock lock(phase_mu_);
  phase_.on_checkpoint = nullptr;
}

bool Master::wait_for_dones_locked(double patience_s, bool keeping) {
  const int parts = static_cast<int>(phase_.members.size()) - 1;
  const comm::Liveness written = liveness();
  comm::LivenessWatch writing(written);
  auto deadline = now() + seconds_of(patience_s);
  while (static_cast<int>(phase_.dones.size()) < parts && phase_.lost.empty()) {
    if (wait_phase_until(deadline)) continue;
    if (!writing.moved()) break;
    deadline = now() + seconds_of(patience_s);
  }
  if (static_cast<int>(phase_.dones.size()) == parts) return true;
  if (phase_.lost.empty()) return false;
  // A member is lost: the others, told to abort (again: the master's own
  // run may have ended well before the loss), say what they kept and what
  // their collectives waited for (their flight records: the error names
  // the node they waited for). Only a live job waits long for them.
  for (int r : phase_.members)
    if (r != 0 && !phase_.dones.count(r)) post_to_node(r, ctl::Abort{phase_.job_id, phase_.phase, phase_.lost});
  const auto survivors_deadline = now() + seconds_of(keeping ? kSurvivorsReportSeconds : kSurvivorsRecordSeconds);
  for (;;) {
    bool reported = true;
    for (int r : phase_.members)
      if (r != 0 && !phase_.dones.count(r) &&
          std::find(phase_.lost_ranks.begin(), phase_.lost_ranks.end(), r) == phase_.lost_ranks.end())
        reported = false;
    if (reported || !wait_phase_until(survivors_deadline)) break;
  }
  return true;
}

std::string Master::wait_for_whole_cluster(double seconds) {
  MutexLock lock(phase_mu_);
  const auto deadline = now() + seconds_of(seconds);
  for (;;) {
    const bool whole = std::none_of(lost_.begin() + 1, lost_.end(), [](bool lost) { return lost; });
    if (whole) return {};
    if (!wait_phase_until(deadline)) break;
  }
  std::string missing;
  for (int r = 1; r < world_; ++r)
    if (lost_[r]) missing += (missing.empty() ? "" : ", ") + node_name(options_.machines, r);
  return missing;
}

}  // namespace rill::agent_internal
