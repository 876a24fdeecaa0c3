// The master's side of the control plane: what it does with each control
// message from a node or a client (loop thread). One overload of
// master_on per message type and no catch-all, so a new message type fails
// to compile until the master says what it does with it.
#include "runtime/cluster/agent.h"
#include "runtime/cluster/master.h"

#include "runtime/checkpoint/checkpoint_pieces.h"
#include "runtime/cluster/comm_waits.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "graph/job_file.h"
#include "base/printable.h"
#include "runtime/cluster/control_codec.h"

namespace rill::agent_internal {

void Master::master_handle(const std::string& identity, ctl::Message message) {
  int node = -1;
  for (int r = 1; r < world_; ++r)
    if (identity_of_node_[r] == identity) node = r;
  const From from{identity, node};
  if (auto* join = std::get_if<ctl::Join>(&message)) return master_on(from, *join);
  if (node > 0 && lost_[node]) {
    // Declared lost (a silent machine, or one behind a silent link, that
    // speaks again): it must not take part in anything on this control
    // link. It stops its part and joins again on a new one, as a restarted
    // agent would (rejoin()).
    if (!told_to_join_again_[node])
      send_router(identity, ctl::encode(ctl::Shutdown{
                                fmt::format("{} was declared lost by the master", node_name(options_.machines, node)),
                                true}));
    told_to_join_again_[node] = true;
    return;
  }
  if (node > 0) last_seen_[node] = now();
  std::visit([&](auto& m) { master_on(from, m); }, message);
}

// A restarted agent (the first join of each is handled by join()).
void Master::master_on(const From& from, ctl::Join& m) {
  std::string error = join_error(m, from.identity);
  if (error.empty()) error = take_address(m.rank, m.address);
  if (!error.empty()) {
    spdlog::warn("refused a node: {}", error);
    send_router(from.identity, ctl::encode(ctl::JoinReply{false, error, world_}));
    return;
  }
  rejoin(from.identity, m.rank, m.data_session);
}

void Master::master_on(const From& from, ctl::Submit& m) {
  auto job = graph::parse_job_json(m.job_text, m.file_name.empty() ? "submitted job" : m.file_name, m.overrides);
  Status allowed = job.ok() ? check_job_paths(*job, m.resume, roots_, node_name(options_.machines, 0)) : job.status();
  if (allowed.ok() && (m.min_nodes < 0 || m.min_nodes > world_))
    allowed = invalid_argument("--min-nodes {}: the cluster has {} node(s); give 1 to {}", m.min_nodes, world_,
                               world_);
  // Replicas serve a job that goes on without a lost node: asked for
  // without that (no --min-nodes, or all the nodes) they would be copied
  // for nothing.
  for (const auto& [flag, asked] : {std::pair<const char*, int64_t>{"--replica-every", m.replica_every},
                                    {"--replica-copies", m.replica_copies}})
    if (allowed.ok() && asked > 0 && (m.min_nodes == 0 || m.min_nodes >= world_))
      allowed = invalid_argument("{} {} copies each node's pieces for a job that goes on without a lost node: it needs "
                                 "--min-nodes N below the cluster's {} node(s)",
                                 flag, asked, world_);
  if (allowed.ok() && (m.replica_copies < 0 || m.replica_copies > std::max(world_ - 1, 1)))
    allowed = invalid_argument("--replica-copies {}: each node's pieces go to at most the {} other node(s)",
                               m.replica_copies, world_ - 1);
  // More copies serve only losses of that many nodes at once, which the
  // job must be allowed to go on after.
  if (allowed.ok() && m.replica_copies > 1 && world_ - m.replica_copies < m.min_nodes)
    allowed = invalid_argument("--replica-copies {} serves losing {} nodes at once, which leaves {} of the cluster's {}: "
                               "fewer than --min-nodes {}",
                               m.replica_copies, m.replica_copies, world_ - m.replica_copies, world_, m.min_nodes);
  if (allowed.ok() && m.replica_copies > 0 && m.replica_every == 0)
    allowed = invalid_argument("--replica-copies {} with --replica-every 0: there are no replicas to copy",
                               m.replica_copies);
  if (allowed.ok() && m.replica_every < -1)
    allowed = invalid_argument("--replica-every {}: give a number of steps, or 0 for none", m.replica_every);
  if (!allowed.ok()) {
    send_router(from.identity, ctl::encode(ctl::SubmitReply{0, allowed.message(), 0}));
    return;
  }
  if (queue_.size() >= kMaxQueuedJobs || queued_bytes_ + m.job_text.size() > options_.max_message_bytes) {
    send_router(from.identity,
                ctl::encode(ctl::SubmitReply{
                    0,
                    fmt::format("the master's queue is full: {} job(s) of {} bytes wait already (it holds at most {} "
                                "jobs and --max-message-bytes {} bytes of job files); submit again when one has run",
                                queue_.size(), queued_bytes_, kMaxQueuedJobs, options_.max_message_bytes),
                    0}));
    return;
  }
  queued_bytes_ += m.job_text.size();
  QueuedJob q{next_job_id_++, from.identity, std::move(m), std::move(*job)};
  int ahead = static_cast<int>(queue_.size()) + (job_running_ ? 1 : 0);
  send_router(from.identity, ctl::encode(ctl::SubmitReply{q.id, "", ahead}));
  queue_.push_back(std::move(q));
}

// Whether a message that speaks for node `node` came on that node's own
// link (a node speaks only for itself; a client, holding a client key,
// never for a node), else it is dropped, saying so.
bool Master::from_node_itself(const From& from, int node, const char* what) {
  if (from.node > 0 && node == from.node) return true;
  spdlog::warn("{}: dropped {} of node {} from {}: not that node's", me(), what, node,
               from.node > 0 ? node_name(options_.machines, from.node)
                             : fmt::format("client '{}'", printable_name(from.identity)));
  return false;
}

void Master::master_on(const From& from, ctl::PlanAck& m) {
  // A node acks its own part, on its own link (what it lists is expected
  // of it in checkpoints).
  if (!from_node_itself(from, m.node, "an ack of a plan")) return;
  MutexLock lock(phase_mu_);
  if (m.job_id == phase_.job_id && m.phase == phase_.phase) phase_.acks[m.node] = std::move(m);
  phase_cv_.notify_all();
}

void Master::master_on(const From& from, ctl::Done& m) {
  // Its error would stop the run, its variables be taken as the node's.
  if (!from_node_itself(from, m.node, "the end of a run")) return;
  MutexLock lock(phase_mu_);
  if (m.job_id == phase_.job_id && m.phase == phase_.phase) {
    if (!m.error.empty() && local_runtime_)
      local_runtime_->abort(ctl::node_error(m.code, node_name(options_.machines, m.node), m.error));
    phase_.dones[m.node] = std::move(m);
  }
  phase_cv_.notify_all();
}

void Master::master_on(const From& from, ctl::CheckpointWritten& m) {
  // Only a node of the phase reports a file, its own: the plan's node it
  // is, by the link it came on (node 0's reports never cross the network).
  int plan_node = -1;
  size_t nodes = 0;
  {
    MutexLock lock(phase_mu_);
    nodes = phase_.members.size();
    for (size_t i = 0; i < phase_.members.size(); ++i)
      if (from.node > 0 && phase_.members[i] == from.node) plan_node = static_cast<int>(i);
  }
  if (plan_node < 0 || m.node != plan_node || m.file != node_file_name(plan_node, static_cast<int>(nodes))) {
    spdlog::warn("{}: dropped a checkpoint report for node {} ('{}') from {}: not that node's", me(), m.node,
                 printable_name(m.file.substr(0, 64)),
                 from.node > 0 ? node_name(options_.machines, from.node)
                               : fmt::format("client '{}'", printable_name(from.identity)));
    return;
  }
  NodeCheckpoint written{m.steps_done, Status(), NodeFile{m.node, std::move(m.file), m.bytes, {}}, m.block_seconds,
                         m.write_seconds};
  if (!m.error.empty()) written.status = Status(m.code == Code::kOk ? Code::kInternal : m.code, m.error);
  for (ctl::CheckpointPiece& p : m.pieces)
    written.file.pieces.push_back(TensorPiece{std::move(p.tensor), std::move(p.shape), std::move(p.offset),
                                              std::move(p.piece_shape), p.dtype, {}});
  // Under the lock: the phase's completer lives until execute_phase clears
  // it (its add() never waits). A report of an earlier phase (an attempt
  // given up), or after the phase, is not this run's.
  MutexLock lock(phase_mu_);
  if (m.job_id == phase_.job_id && m.phase == phase_.phase && phase_.on_checkpoint)
    phase_.on_checkpoint(m.node, std::move(written));
}

void Master::master_on(const From& from, ctl::Shutdown&) {
  for (int r = 1; r < world_; ++r)
    if (!identity_of_node_[r].empty()) send_router(identity_of_node_[r], ctl::encode(ctl::Shutdown{}));
  send_router(from.identity, ctl::encode(ctl::StatusReply{R"({"state": "shutting down"})"}));
  shutdown_ = true;
  // The job running here ends now, and no later phase starts.
  MutexLock lock(phase_mu_);
  stopping_ = true;
  if (local_runtime_) local_runtime_->abort(Status(Code::kAborted, "the cluster is shutting down"));
  phase_cv_.notify_all();
}

// From a client: rill stop, or Ctrl-C on rill run --nodes and rill launch.
// The client is told what was done (a following client reads past the
// answer).
void Master::master_on(const From& from, ctl::Stop& m) {
  if (!job_running_ && m.job_id == 0) {
    send_router(from.identity, ctl::encode(ctl::StatusReply{
                                   nlohmann::json{{"stopping", "no job is running: nothing to stop"}}.dump()}));
    return;
  }
  if (!job_running_ || (m.job_id != 0 && m.job_id != running_id_)) {
    const std::string error = fmt::format("job {} is not running{}", m.job_id,
                                          job_running_ ? fmt::format(" (job {} is)", running_id_) : "");
    send_router(from.identity, ctl::encode(ctl::StatusReply{nlohmann::json{{"error", error}}.dump()}));
    return;
  }
  const std::string how = m.now ? "at once" : "at the next step boundary (a checkpoint there if the job has a checkpoint.dir)";
  spdlog::warn("job {}: a client asks it to stop {}", running_id_, how);
  send_router(from.identity,
              ctl::encode(ctl::StatusReply{
                  nlohmann::json{{"stopping", fmt::format("job {} ('{}') stops {}", running_id_, running_name_, how)}}
                      .dump()}));
  stop_job_ = true;
  MutexLock lock(phase_mu_);
  if (m.now && local_runtime_)
    local_runtime_->abort(Status(Code::kAborted, "interrupted again: stopped at once"));
  else if (!m.now)
    begin_stop_locked();
}

void Master::master_on(const From& from, ctl::Held& m) {
  if (!from_node_itself(from, m.node, "a hold's answer")) return;
  MutexLock lock(phase_mu_);
  if (!phase_.held.empty() && m.job_id == phase_.job_id && m.phase == phase_.phase) {
    phase_.held[m.node] = m.last_begun;
    end_when_held_locked();
  }
}

void Master::master_on(const From& from, ctl::LinkError& m) {
  if (from_node_itself(from, m.node, "a link's failure")) link_failed(m.reason);
}

void Master::master_on(const From& from, ctl::Heartbeat& m) {
  // A node's checkpoint writes going on, also after its run ended (its last
  // files): the cluster's runs, and the wait for Dones, are not stuck.
  if (from.node > 0) {
    MutexLock lock(disk_mu_);
    DiskHeard& heard = disk_heard_[from.node];
    const uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(m.checkpoint_bytes, 0));
    if (bytes > heard.bytes) cluster_disk_.fetch_add(bytes - heard.bytes, std::memory_order_relaxed);
    heard = {bytes, m.checkpoint_step};  // fewer bytes: the node's agent was started again
  }
  if (from.node > 0 && m.job_id >= 0 && job_running_ && m.job_id == running_id_) {
    pace_.add(from.node, pace_key(m.job_id, m.phase), clock_seconds(), m.steps, m.busy_seconds);
    links_.add(from.node, clock_seconds(), std::move(m.link_rates));
    // A record past its bound is not kept (comm_waits.h reads none past it).
    if (m.comm.size() > kMaxRecordBytes) m.comm.clear();
    activity_[from.node] = {std::move(m.threads), std::move(m.received_bytes_from), std::move(m.comm)};
  }
}

void Master::master_on(const From& from, ctl::StatusRequest&) {
  send_router(from.identity, ctl::encode(ctl::StatusReply{status_json()}));
}

// What the master sends and never receives: a peer that sends one is
// confused or hostile; it is logged and dropped.
void Master::master_on(const From& from, ctl::JoinReply&) { not_for_master(from, "JoinReply"); }
void Master::master_on(const From& from, ctl::SubmitReply&) { not_for_master(from, "SubmitReply"); }
void Master::master_on(const From& from, ctl::PlanPart&) { not_for_master(from, "PlanPart"); }
void Master::master_on(const From& from, ctl::Start&) { not_for_master(from, "Start"); }
void Master::master_on(const From& from, ctl::Progress&) { not_for_master(from, "Progress"); }
void Master::master_on(const From& from, ctl::Result&) { not_for_master(from, "Result"); }
void Master::master_on(const From& from, ctl::StatusReply&) { not_for_master(from, "StatusReply"); }
void Master::master_on(const From& from, ctl::Abort&) { not_for_master(from, "Abort"); }
void Master::master_on(const From& from, ctl::Rejoined&) { not_for_master(from, "Rejoined"); }
void Master::master_on(const From& from, ctl::Hold&) { not_for_master(from, "Hold"); }
void Master::master_on(const From& from, ctl::EndAt&) { not_for_master(from, "EndAt"); }
void Master::master_on(const From& from, ctl::Gather&) { not_for_master(from, "Gather"); }

void Master::not_for_master(const From& from, const char* type) {
  spdlog::warn("{}: dropped a {} from {}: only the master sends it", node_name(options_.machines, 0), type,
               from.node > 0 ? node_name(options_.machines, from.node) : fmt::format("client '{}'", printable_name(from.identity)));
}

}  // namespace rill::agent_internal
