// The agent's internals, shared by runtime/cluster/agent.cc (sockets, joining, the
// control loop) and runtime/cluster/agent_jobs.cc (the master's job coordination).
// Not a public header: use runtime/agent.h.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/mutex.h"
#include "comm/counting_transport.h"
#include "graph/job.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/control_channel.h"
#include "runtime/cluster/control_codec.h"
#include "comm/cluster_key.h"
#include "runtime/cluster/allowed_roots.h"
#include "runtime/watch/http_server.h"
#include "runtime/watch/metrics_board.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/watch/pace.h"
#include "runtime/cluster/serial_executor.h"
#include "runtime/node/node_runtime.h"

namespace rill::agent_internal {

using Clock = std::chrono::steady_clock;
namespace ctl = control;

// A phase of a job (its training, its evaluation) is paced on its own.
inline int64_t pace_key(int64_t job, int phase) { return (job << kPhaseBits) | phase; }

inline Clock::duration seconds_of(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

inline std::string node_name(const std::vector<Machine>& machines, int rank) {
  return fmt::format("node {} ({})", rank, format_machine(machines[rank]));
}

// A control message on its way: to a peer of our ROUTER, or up to the master.
struct Outgoing {
  bool to_master = false;
  std::string identity;
  std::string bytes;
};

struct QueuedJob {
  int64_t id = 0;
  std::string client;  // ROUTER identity of the submitting client
  ctl::Submit submit;
  graph::Job job;
};

// What the master's job thread waits for while a phase runs on every node.
struct PhaseState {
  int64_t job_id = -1;
  int phase = -1;
  std::map<int, ctl::PlanAck> acks;  // node -> its ack (error "" = ok)
  std::map<int, ctl::Done> dones;
  std::string lost;                  // a lost node's description
  std::function<void(int64_t, VariablePiece)> on_snapshot;  // the job's checkpoint collector
  // Stopping early at a step every node agrees on (actor/run_end.h): the
  // phase's steps, each node's last step begun (node 0's from when the
  // nodes were told to hold: empty until then), and the end sent (-1: none
  // yet).
  int64_t first_step = 0;
  int64_t plan_steps = 0;
  std::map<int, int64_t> held;
  int64_t end = -1;
};

inline std::vector<ctl::Tensor> to_tensors(VariablePiece piece) {
  std::vector<ctl::Tensor> out;
  for (auto& [state, values] : piece.state)
    out.push_back(ctl::Tensor{piece.name + "/" + state, piece.logical_shape, piece.offset, piece.shape, std::move(values)});
  out.insert(out.begin(), ctl::Tensor{piece.name, piece.logical_shape, piece.offset, piece.shape, std::move(piece.values)});
  return out;
}

// The inverse of to_tensors: the first tensor is the variable, the rest its state.
inline VariablePiece to_piece(std::vector<ctl::Tensor>& tensors, size_t begin, size_t end) {
  ctl::Tensor& v = tensors[begin];
  VariablePiece piece{v.name, v.shape, v.offset, v.piece_shape, std::move(v.values), {}};
  for (size_t i = begin + 1; i < end; ++i)
    piece.state.emplace_back(tensors[i].name.substr(v.name.size() + 1), std::move(tensors[i].values));
  return piece;
}

class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();
  Status start();
  Status join();
  Status serve();

 private:
  bool is_master() const { return options_.rank == 0; }
  // The loop's time (AgentOptions::clock).
  Clock::time_point now() const { return clock_->now(); }
  double seconds_since(Clock::time_point t) const { return std::chrono::duration<double>(now() - t).count(); }
  double clock_seconds() const { return std::chrono::duration<double>(now().time_since_epoch()).count(); }
  void post(Outgoing out);
  void post_to_node(int node, const ctl::Message& m);
  void flush();
  // Sends `out` now; false when its peer's queue is full (ZeroMQ's
  // high-water mark: nothing was sent). Too large a message, or one to a
  // client that does not read its answers, is logged and dropped.
  bool send_now(const Outgoing& out);
  // Sends, or keeps for the next flush behind what is kept for the same
  // peer: control messages between agents are never dropped while their peer
  // lives (a node declared lost loses what was kept for it).
  void deliver(Outgoing out);
  bool router_send_now(const std::string& identity, const std::string& bytes);
  // The control channel: options_.control_channel's, or ZeroMQ's; with
  // options_.fault, wrapped to inject it.
  Status open_channel();
  void send_router(const std::string& identity, const std::string& bytes);
  // Loop-thread handlers.
  void on_server_message(const std::string& identity, const std::string& bytes);
  void on_master_message(const std::string& bytes);
  void master_handle(const std::string& identity, ctl::Message message);
  // Who sent a message to the master: its routing identity, and its node
  // (-1: a client).
  struct From {
    const std::string& identity;
    int node = -1;
  };
  // The master's handling of each message type (agent_master.cc): one
  // overload per type and no catch-all, so a new type fails to compile
  // until the master says what it does with it.
  void master_on(const From& from, ctl::Join& m);
  void master_on(const From& from, ctl::Submit& m);
  void master_on(const From& from, ctl::PlanAck& m);
  void master_on(const From& from, ctl::Done& m);
  void master_on(const From& from, ctl::Snapshot& m);
  void master_on(const From& from, ctl::Shutdown& m);
  void master_on(const From& from, ctl::Stop& m);
  void master_on(const From& from, ctl::Held& m);
  void master_on(const From& from, ctl::LinkError& m);
  void master_on(const From& from, ctl::Heartbeat& m);
  void master_on(const From& from, ctl::StatusRequest& m);
  void master_on(const From& from, ctl::JoinReply& m);
  void master_on(const From& from, ctl::SubmitReply& m);
  void master_on(const From& from, ctl::PlanPart& m);
  void master_on(const From& from, ctl::Start& m);
  void master_on(const From& from, ctl::Progress& m);
  void master_on(const From& from, ctl::Result& m);
  void master_on(const From& from, ctl::StatusReply& m);
  void master_on(const From& from, ctl::Abort& m);
  void master_on(const From& from, ctl::Rejoined& m);
  void master_on(const From& from, ctl::Hold& m);
  void master_on(const From& from, ctl::EndAt& m);
  void not_for_master(const From& from, const char* type);
  void worker_handle(ctl::Message message);
  // A non-master agent's handling of each message type from the master
  // (agent_worker.cc), exhaustive as master_on.
  void worker_on(ctl::PlanPart& m);
  void worker_on(ctl::Start& m);
  void worker_on(ctl::Abort& m);
  void worker_on(ctl::Shutdown& m);
  void worker_on(ctl::Hold& m);
  void worker_on(ctl::EndAt& m);
  void worker_on(ctl::Rejoined& m);
  void worker_on(ctl::Heartbeat& m);
  void worker_on(ctl::JoinReply& m);
  void worker_on(ctl::Join& m);
  void worker_on(ctl::Submit& m);
  void worker_on(ctl::SubmitReply& m);
  void worker_on(ctl::PlanAck& m);
  void worker_on(ctl::Done& m);
  void worker_on(ctl::Snapshot& m);
  void worker_on(ctl::Progress& m);
  void worker_on(ctl::Result& m);
  void worker_on(ctl::StatusRequest& m);
  void worker_on(ctl::StatusReply& m);
  void worker_on(ctl::LinkError& m);
  void worker_on(ctl::Stop& m);
  void worker_on(ctl::Held& m);
  void not_for_node(const char* type);
  void check_liveness();
  // Why a Join from the peer with routing id `identity` is refused ("" if not).
  std::string join_error(const ctl::Join& join, const std::string& identity) const;
  // Marks a node lost and stops the running phase, naming it (loop thread).
  void declare_lost(int rank, const std::string& reason);
  void link_failed(const std::string& reason);
  // Takes a restarted agent back in its rank (loop thread).
  void rejoin(const std::string& identity, int rank);
  std::string status_json();
  // Master job thread.
  void run_queued(QueuedJob job);
  // run_job, again from the newest checkpoint after a restartable failure,
  // up to the submit's max_restarts; `first_step` is set by the executor.
  JobResult run_with_restarts(const QueuedJob& queued, JobRunOptions options, Clock::time_point& first_step);
  // Waits until no node is lost, for up to `seconds`; the lost nodes' names
  // when some still are.
  std::string wait_for_whole_cluster(double seconds);
  // Waits on phase_cv_ for a notification, or briefly; false (at once) once
  // `deadline` on the agent's clock has passed. Callers loop on their
  // condition.
  bool wait_phase_until(Clock::time_point deadline) REQUIRES(phase_mu_);
  // Node 0 runs `phase.plan`; every other node compiles its own from
  // `job_text` and the phase's options.
  RunReport execute_phase(int64_t job_id, int phase, const std::string& job_text, const PhasePlan& plan,
                          const RunOptions& run_options);
  void start_next_job();
  // Stopping the running phase at a step boundary (phase_mu_ held): holds
  // every node once the phase runs; ends them all once each has said where
  // it is.
  void begin_stop_locked() REQUIRES(phase_mu_);
  void end_when_held_locked() REQUIRES(phase_mu_);

  AgentOptions options_;
  int world_;
  std::shared_ptr<const AgentClock> clock_;
  std::unique_ptr<ControlChannel> channel_;
  void forget_stale_losses();
  AllowedRoots roots_;  // set by start(); read-only after
  std::unique_ptr<comm::CountingTransport> transport_;
  bool shutdown_ = false;
  Status fatal_;

  Mutex out_mu_;
  std::vector<Outgoing> outbox_ GUARDED_BY(out_mu_);
  std::deque<Outgoing> backlog_;  // loop thread: held back by full queues, in order
  int64_t unread_answers_dropped_ = 0;     // loop thread: since the last warning
  Clock::time_point unread_answers_warned_{};

  // Master (loop thread).
  std::vector<std::pair<std::string, std::string>> early_;  // (identity, message) received while forming
  std::vector<std::string> identity_of_node_;
  std::vector<Clock::time_point> last_seen_;
  std::vector<bool> lost_;  // written under phase_mu_ (the job thread reads it)
  std::vector<bool> unreachable_warned_;  // loop thread only
  std::vector<bool> told_to_go_;          // loop thread only: a lost node that still talks was told to exit
  PaceTracker pace_{1};                   // loop thread only: the running job's pace per node
  std::vector<bool> slow_warned_;         // loop thread only: for job warned_job_
  int64_t warned_job_ = -1;               // loop thread only
  void track_pace();
  // Each node's threads and received bytes in the running phase, from its
  // heartbeats (node 0's from its own runtime); loop thread only.
  struct Activity {
    std::vector<ctl::Heartbeat::Thread> threads;
    std::vector<int64_t> received_bytes_from;
  };
  std::vector<Activity> activity_;
  Status start_http();
  void publish_metrics();  // the node table, for /metrics and /api (loop thread)
  MetricsBoard board_;
  std::unique_ptr<HttpServer> http_;       // after board_: stopped before it goes
  std::string http_address_;               // where http_ serves, ADDRESS:PORT (set before the loop runs)
  Clock::time_point last_published_{};     // loop thread only
  // Jobs waiting their turn: at most kMaxQueuedJobs, and at most
  // --max-message-bytes of job text in all, so that clients cannot grow the
  // master's memory by submitting.
  static constexpr size_t kMaxQueuedJobs = 64;
  // Control messages the loop handles in one turn, at most, before it looks
  // at liveness, jobs and what it has to send.
  static constexpr int kMessagesPerTurn = 64;
  std::deque<QueuedJob> queue_;
  size_t queued_bytes_ = 0;
  int64_t next_job_id_ = 1;
  std::thread job_thread_;
  std::atomic<bool> job_running_{false};
  std::atomic<bool> stop_job_{false};  // a client asked the running job to stop (JobRunOptions::stop)
  std::string running_name_;
  int64_t running_id_ = 0;
  // The last kFinishedShown jobs to end, newest last, with their result
  // line or error (rill status). The job thread adds; the loop thread reads.
  struct FinishedJob {
    int64_t id = 0;
    std::string name;
    bool ok = false;
    std::string line;
  };
  static constexpr size_t kFinishedShown = 20;
  Mutex finished_mu_;
  std::deque<FinishedJob> finished_ GUARDED_BY(finished_mu_);

  // Shared by the loop thread and the master's job thread.
  Mutex phase_mu_;
  CondVar phase_cv_;
  PhaseState phase_ GUARDED_BY(phase_mu_);
  NodeRuntime* local_runtime_ GUARDED_BY(phase_mu_) = nullptr;
  bool stopping_ GUARDED_BY(phase_mu_) = false;  // told to shut down; no phase starts

  // Non-master.
  Clock::time_point master_seen_{};  // set by start()
  std::unique_ptr<SerialExecutor> builder_;  // compiles and builds each phase's plan, then acks
  std::pair<int64_t, int> last_part_{-1, -1};  // (job, phase) of the last PlanPart (loop thread)
  std::unique_ptr<SerialExecutor> runner_;   // runs the built phases, one after another
  Mutex run_mu_;
  std::shared_ptr<NodeRuntime> pending_ GUARDED_BY(run_mu_);  // built, waiting for Start
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
  Clock::time_point last_heartbeat_{};  // set by start()
};


}  // namespace rill::agent_internal
