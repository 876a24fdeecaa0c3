// A node's agent (every node but 0): it joins the master, sends heartbeats
// with its running phase's pace, watches the master's liveness, and does
// what the master's messages say: compiles and builds its part of each
// phase off the loop (builder_), runs the built phases one after another
// (runner_), and stops, holds or ends them (node_agent.cc).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "runtime/cluster/agent_impl.h"
#include "runtime/cluster/serial_executor.h"
#include "runtime/watch/link_pace.h"

namespace rill {
class CheckpointCollector;  // runtime/checkpoint/checkpoint_collector.h
}  // namespace rill

namespace rill::agent_internal {

class NodeAgent final : public Agent {
 public:
  explicit NodeAgent(AgentOptions options) : Agent(std::move(options)) {}
  ~NodeAgent() override;
  Status join() override;

 private:
  Status start_kind() override;
  void on_port_message(const std::string& identity, const std::string& bytes) override;
  void on_master_message(const std::string& bytes) override;
  void tick() override;
  int node_of(const std::string&) const override { return -1; }
  std::string identity_of(int) const override { return {}; }
  void finish() override;

  void post_to_master(const ctl::Message& m);
  // The writer of this node's checkpoint files for a phase of `job` (null
  // when its plan holds no piece to write); it reports each file to the master.
  // `pieces`: what its plan writes (snapshot_pieces).
  std::shared_ptr<CheckpointCollector> checkpoint_collector(const graph::Job& job, std::vector<SnapshotPiece> pieces,
                                                            int64_t job_id, int phase, int node, int nodes, int link);
  static constexpr size_t kMaxRecordBytes = size_t{32} << 10;  // a flight record sent with Done
  void join_again(const std::string& lost);
  void add_traces(std::vector<ActorTraceRecord>& traces, ctl::Done* done) const;
  // The handling of each message type from the master: one overload per
  // type and no catch-all, as the master's.
  void worker_on(ctl::PlanPart& m);
  // A node that comes back (part.memory_parts not empty): node 0's memory
  // over the data plane, into `run`'s initial values and state.
  Status take_memory(const ctl::PlanPart& part, RunOptions& run);
  void worker_on(ctl::Start& m);
  void worker_on(ctl::Abort& m);
  void worker_on(ctl::Shutdown& m);
  void worker_on(ctl::Hold& m);
  void worker_on(ctl::EndAt& m);
  void worker_on(ctl::Gather& m);
  void worker_on(ctl::Rejoined& m);
  void worker_on(ctl::Heartbeat& m);
  void worker_on(ctl::JoinReply& m);
  void worker_on(ctl::Join& m);
  void worker_on(ctl::Submit& m);
  void worker_on(ctl::SubmitReply& m);
  void worker_on(ctl::PlanAck& m);
  void worker_on(ctl::Done& m);
  void worker_on(ctl::CheckpointWritten& m);
  void worker_on(ctl::Progress& m);
  void worker_on(ctl::Result& m);
  void worker_on(ctl::StatusRequest& m);
  void worker_on(ctl::StatusReply& m);
  void worker_on(ctl::LinkError& m);
  void worker_on(ctl::Stop& m);
  void worker_on(ctl::Held& m);
  void not_for_node(const char* type);

  // The link up to the master's number: join_again() replaces it, and work
  // begun on an earlier one (a plan being built, a queued or ending run)
  // reports nothing on it.
  std::atomic<int> links_{0};
  LinkWindow links_window_;  // loop thread: its data connections' counters, read at each heartbeat
  Clock::time_point master_seen_{};     // loop thread; set by start_kind()
  Clock::time_point last_heartbeat_{};  // loop thread; set by start_kind()
  std::unique_ptr<SerialExecutor> builder_;  // compiles and builds each phase's plan, then acks
  std::pair<int64_t, int> last_part_{-1, -1};  // (job, phase) of the last PlanPart (loop thread)
  std::string told_to_join_again_;  // loop thread: the master's Shutdown with join_again, until tick() acts on it
  std::unique_ptr<SerialExecutor> runner_;   // runs the built phases, one after another
  Mutex run_mu_;
  std::shared_ptr<NodeRuntime> pending_ GUARDED_BY(run_mu_);  // built, waiting for Start
  std::shared_ptr<CheckpointCollector> pending_checkpoint_ GUARDED_BY(run_mu_);  // its checkpoint writer, if any
  std::shared_ptr<Replicator> pending_replicator_ GUARDED_BY(run_mu_);  // its copies to the next node, if any
  // The last phase started here, while it lives (the master's Hold and
  // EndAt reach it before its run begins too).
  std::weak_ptr<NodeRuntime> started_ GUARDED_BY(run_mu_);
  int64_t started_job_ GUARDED_BY(run_mu_) = -1;
  int started_phase_ GUARDED_BY(run_mu_) = -1;
  // This node's runtime of (job, phase): pending or started; null if none.
  std::shared_ptr<NodeRuntime> runtime_of_locked(int64_t job, int phase) REQUIRES(run_mu_);
  int64_t pending_job_ GUARDED_BY(run_mu_) = -1;
  int pending_phase_ GUARDED_BY(run_mu_) = -1;
  int64_t aborted_job_ GUARDED_BY(run_mu_) = -1;  // with its phases up to aborted_phase_
  int aborted_phase_ GUARDED_BY(run_mu_) = -1;
  NodeRuntime* running_ GUARDED_BY(run_mu_) = nullptr;
  int64_t running_job_ GUARDED_BY(run_mu_) = -1;
  int running_phase_ GUARDED_BY(run_mu_) = 0;
};

}  // namespace rill::agent_internal
