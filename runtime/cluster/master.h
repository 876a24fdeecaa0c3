// The master: the agent of node 0. It forms the cluster (every listed node
// joins, version, schema and devices checked, by the deadline), watches the
// nodes' liveness, takes jobs from clients (queued, one runs at a time),
// runs each job's phases on every node (runtime/cluster/master_jobs.cc)
// and its attempts: restarts and live membership (master_attempts.cc),
// answers status and serves /metrics and the page (master_watch.cc), and
// handles every control message a node or a client sends
// (master_messages.cc). Its loop thread handles messages; a job thread runs
// the job; they share the phase's state under phase_mu_.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cluster/agent_impl.h"
#include "runtime/cluster/replica_choice.h"
#include "runtime/watch/bucket_sizing.h"
#include "runtime/watch/http_server.h"
#include "runtime/watch/metrics_board.h"
#include "runtime/watch/link_pace.h"
#include "runtime/watch/pace.h"

namespace rill::agent_internal {

struct QueuedJob {
  int64_t id = 0;
  std::string client;  // ROUTER identity of the submitting client
  ctl::Submit submit;
  graph::Job job;
};

// Which nodes an attempt of a job runs on, and what they keep (live
// membership, docs/CLUSTER.md).
struct Membership {
  std::vector<int> members;  // machine-list ranks, node 0 first: the plan's node n is members[n]
  bool keep_steps = false;   // every node keeps its last two steps in memory
  int64_t kept_step = -1;    // >= 0: the attempt starts from every node's memory at this step
  std::vector<std::string> variables;  // the job's, which a whole model has
  std::map<std::string, Shape> shapes;  // theirs and loss scaling's, by name: what a gather may make
  // Members that come back (a lost node's agent again): they hold nothing,
  // and start from the master's memory at kept_step, sent with their part.
  std::vector<int> newcomers;
  // > 0: each node's pieces go to the next member's memory every this many
  // steps (runtime/cluster/replicator.h).
  int64_t replica_every = 0;
  // With replicas: to this many next members (a plan of fewer nodes, to
  // every other one), so up to this many nodes lost at once go on.
  int replica_copies = 1;
  // A layout that splits variables going on without a lost node: node 0
  // gathers, from each rank here, its own pieces (when `own`) and the
  // replicas of the lost ranks listed, after kept_step steps
  // (master_gather.cc); every other member then starts from node 0's memory.
  std::map<int, GatherFrom> gather;
  bool from_replicas = false;  // it goes on from the replicas (node 0's gather, or what it gathered last)
  bool member(int rank) const { return std::find(members.begin(), members.end(), rank) != members.end(); }
};

// What the master's job thread waits for while a phase runs on every node.
struct PhaseState {
  int64_t job_id = -1;
  int phase = -1;
  std::map<int, ctl::PlanAck> acks;  // node -> its ack (error "" = ok)
  std::map<int, ctl::Done> dones;
  std::string lost;                  // a lost node's description
  std::function<void(int, NodeCheckpoint)> on_checkpoint;  // the run's checkpoint completer (PhasePlan)
  // Stopping early at a step every node agrees on (actor/run_end.h): the
  // phase's steps, each node's last step begun (node 0's from when the
  // nodes were told to hold: empty until then), and the end sent (-1: none
  // yet).
  int64_t first_step = 0;
  int64_t plan_steps = 0;
  std::map<int, int64_t> held;
  int64_t end = -1;
  std::vector<int> members;  // the phase's nodes, as machine-list ranks (node 0 first)
  bool keeping = false;      // a live job's training: its nodes keep their last steps
  int64_t replica_every = 0;  // its nodes copy their pieces every this many steps (Membership::replica_every)
  std::vector<int> lost_ranks;  // members lost while it ran
  bool member(int rank) const { return std::find(members.begin(), members.end(), rank) != members.end(); }
};


class Master final : public Agent {
 public:
  explicit Master(AgentOptions options) : Agent(std::move(options)) {}
  ~Master() override;
  Status join() override;

 private:
  Status start_kind() override;
  void on_port_message(const std::string& identity, const std::string& bytes) override;
  void on_master_message(const std::string& bytes) override;
  void tick() override;
  int node_of(const std::string& identity) const override;
  std::string identity_of(int node) const override;
  void finish() override;

  void post_to_node(int node, const ctl::Message& m);
  void master_handle(const std::string& identity, ctl::Message message);
  // Who sent a message to the master: its routing identity, and its node
  // (-1: a client).
  struct From {
    const std::string& identity;
    int node = -1;
  };
  // The handling of each message type (master_messages.cc): one overload
  // per type and no catch-all, so a new type fails to compile until the
  // master says what it does with it.
  bool from_node_itself(const From& from, int node, const char* what);
  void master_on(const From& from, ctl::Join& m);
  void master_on(const From& from, ctl::Submit& m);
  void master_on(const From& from, ctl::PlanAck& m);
  void master_on(const From& from, ctl::Done& m);
  void master_on(const From& from, ctl::CheckpointWritten& m);
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
  void master_on(const From& from, ctl::Gather& m);
  void not_for_master(const From& from, const char* type);
  // Heartbeats to the nodes, and each node's liveness.
  void check_liveness();
  // Why a Join from the peer with routing id `identity` is refused ("" if not).
  std::string join_error(const ctl::Join& join, const std::string& identity) const;
  // Marks a node lost and stops the running phase, naming it (loop thread).
  void declare_lost(int rank, const std::string& reason);
  void link_failed(const std::string& reason);
  // Takes a restarted agent back in its rank (loop thread).
  void rejoin(const std::string& identity, int rank, const std::string& session);
  // Moves rank `rank`'s data port where its joining agent listens; the
  // error that refuses the join, or "".
  std::string take_address(int rank, const std::string& address);
  std::string status_json();
  // Master job thread.
  void run_queued(QueuedJob job);
  // run_job, again from the newest checkpoint after a restartable failure,
  // up to the submit's max_restarts; `first_step` is set by the executor.
  // With the submit's min_nodes, a lost node's job goes on from the
  // survivors' memory instead (`membership`: the nodes each attempt runs on).
  // Buckets sized by the link go on from memory with the new size, the
  // job's text the nodes compile (`job_text`) written again.
  JobResult run_with_restarts(const QueuedJob& queued, JobRunOptions options, Clock::time_point& first_step,
                              Membership& membership, StatusOr<std::string>* job_text);
  // A run going on with the buckets the link chose: the job with them, the
  // attempt before (whose result the next joins) and the step they start from.
  struct BucketRun {
    std::optional<graph::Job> job;
    std::optional<JobResult> before;
    int64_t from = -1;
  };
  // After an attempt ended at a step boundary for the buckets the link
  // chose: the same nodes go on from their memory with a plan of that size
  // (true: the caller runs the next attempt with `options`), else
  // `result.status` says why not.
  bool go_on_with_buckets(const QueuedJob& queued, const BucketChoice& choice, bool live, JobResult& result,
                          Membership& membership, JobRunOptions& options, BucketRun& run,
                          StatusOr<std::string>* job_text);
  // `step` where node 0 holds the model it gathered from the replicas for
  // `queued` at that step and no complete checkpoint of that step or a
  // later one exists (a restart of every node goes on from it); else -1.
  int64_t restart_from_gathered(const QueuedJob& queued, int64_t step) const;
  // After an attempt of a live job ended (a node lost, or `step` >= 0: at
  // that step, to take back nodes that came back): the nodes it goes on
  // with (every node up, at least `min_nodes`), the newcomers among them
  // (who start from node 0's memory), and the step every node that ran
  // the attempt holds; or why it cannot (then it restarts as without).
  StatusOr<Membership> next_membership(const Membership& ended, int64_t step, int min_nodes);
  // Before a live job's first attempt: the nodes up, when some are down.
  void start_on_nodes_up(const graph::Job& job, Membership& membership, JobRunOptions& options, int min_nodes,
                         const std::function<void(const std::string&)>& say);
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
                          const RunOptions& run_options, const Membership& membership);
  // Waits for the Done of every member but 0 (phase_mu_ held) for
  // `patience_s`, and again each time the cluster's checkpoint writes went on
  // meanwhile (a node's Done follows its last files), or until a member is
  // lost (then, for a phase that keeps its steps, for the others' Dones up
  // to kSurvivorsReportSeconds); false when some did not come.
  bool wait_for_dones_locked(double patience_s, bool keeping) REQUIRES(phase_mu_);
  // The phase's checkpoint reports go nowhere from now on.
  void end_checkpoint_reports();
  // What a node that comes back starts from: node 0's memory (every
  // variable and optimizer state) after `step` steps, the model it gathered
  // where node 0 goes on from that (`gathered`), as encoded PlanParts of job
  // `job_id`'s phase `phase` holding only those tensors, which go over the
  // data plane (memory_transfer.h).
  StatusOr<std::vector<std::string>> memory_messages(int64_t job_id, int phase, int64_t step, bool gathered);
  // Sends `memory` to every newcomer over the data plane, at once (job thread).
  Status send_memory_to(const std::vector<int>& newcomers, uint64_t tag_base, const std::vector<std::string>& memory,
                        double patience_s);
  // Before a phase whose membership gathers (Membership::gather): every
  // piece of the model after its kept_step, into gathered_ (master_gather.cc).
  Status gather_pieces(int64_t job_id, int phase, uint64_t tag_base, const Membership& membership,
                       double patience_s);
  // The same in a phase of its own: what follows a finished training
  // (the eval) reads the model gathered so.
  Status gather_alone(int64_t job_id, int phase, const Membership& membership, double patience_s);
  // A live job that splits variables, after a lost node: the members that
  // go on, each from node 0's memory once node 0 gathered the survivors'
  // own pieces and the lost nodes' replicas at a step all hold (else why not).
  // `step` >= 0: at that step, to take back nodes that came back (every
  // member holds its own pieces of it when the phase ended there).
  StatusOr<Membership> from_replicas(const Membership& ended, Membership next, int64_t step);
  static constexpr int64_t kReplicaEvery = 10;  // a layout that splits variables: replicas every this many steps
  static constexpr double kSurvivorsReportSeconds = 15;
  // A job that ends with the loss: how long the others' records may take
  // (they come with their Done, at once after the abort).
  static constexpr double kSurvivorsRecordSeconds = 2;
  void start_next_job();
  // Stopping the running phase at a step boundary (phase_mu_ held): holds
  // every node once the phase runs; ends them all once each has said where
  // it is.
  void begin_stop_locked() REQUIRES(phase_mu_);
  void end_when_held_locked() REQUIRES(phase_mu_);

  // Loop thread.
  std::vector<std::pair<std::string, std::string>> early_;  // (identity, message) received while forming
  std::vector<std::string> identity_of_node_;  // loop thread only (others post to nodes by number)
  std::string sessions_;  // every node's data-plane session id, by rank (32 bytes each; empty for an in-process data plane)
  std::vector<Clock::time_point> last_seen_;
  std::vector<bool> lost_;  // written under phase_mu_ (the job thread reads it)
  // Each node's agents so far (a restarted agent is the next): what an
  // earlier one kept in memory died with it. Under phase_mu_.
  std::vector<int64_t> incarnation_;
  std::vector<bool> told_to_join_again_;  // a lost node that still talks was told to join again
  Clock::time_point last_heartbeat_{};    // set by start_kind()
  PaceTracker pace_{1};                   // the running job's pace per node
  std::vector<bool> slow_warned_;         // for job warned_job_
  LinkTracker links_{1};                  // the running job's data links per node
  LinkWindow own_links_;                  // node 0's own
  std::vector<bool> slow_link_warned_;    // for job warned_job_
  int64_t warned_job_ = -1;
  void track_pace();
  // Each node's threads and received bytes in the running phase, from its
  // heartbeats (node 0's from its own runtime).
  struct Activity {
    std::vector<ctl::Heartbeat::Thread> threads;
    std::vector<int64_t> received_bytes_from;
    std::string comm;  // its flight record (NodePace::comm), as JSON
  };
  std::vector<Activity> activity_;
  // Each node's checkpoint writes as its heartbeats last said: the bytes,
  // whose growth adds to cluster_disk_, and the step whose file it writes
  // (-1: none).
  struct DiskHeard {
    uint64_t bytes = 0;
    int64_t step = -1;
  };
  Mutex disk_mu_;
  std::vector<DiskHeard> disk_heard_ GUARDED_BY(disk_mu_);
  // "; node 1 (ADDRESS) was writing its checkpoint of step 3", for each node
  // writing one now (a stall's error: training may have waited for it).
  std::string checkpoints_being_written();
  Status start_http();
  void publish_metrics();  // the node table, for /metrics and /api (loop thread)
  MetricsBoard board_;
  std::unique_ptr<HttpServer> http_;       // after board_: stopped before it goes
  std::string http_address_;               // where http_ serves, ADDRESS:PORT (set before the loop runs)
  Clock::time_point last_published_{};
  // Jobs waiting their turn: at most kMaxQueuedJobs, and at most
  // --max-message-bytes of job text in all, so that clients cannot grow the
  // master's memory by submitting.
  static constexpr size_t kMaxQueuedJobs = 64;
  std::deque<QueuedJob> queue_;
  size_t queued_bytes_ = 0;
  int64_t next_job_id_ = 1;
  std::thread job_thread_;
  std::atomic<bool> job_running_{false};
  std::atomic<int64_t> control_bytes_from_nodes_{0};  // every control message from another node, counted
  std::atomic<bool> stop_job_{false};  // a client asked the running job to stop (JobRunOptions::stop)
  // A node the running live job left behind is back: the training phase
  // ends at a step boundary and the job goes on with it (JobRunOptions::regroup).
  std::atomic<bool> regroup_{false};
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
  // The running job's nodes now, by rank (live membership: those that remain).
  std::vector<int> running_members_ GUARDED_BY(finished_mu_);

  // Buckets sized by the link (train.buckets_by_link,
  // runtime/watch/bucket_sizing.h): armed by the job thread for a job's
  // training, decided once by the loop thread (track_pace) from every
  // member's pace and links while the phase keeps its steps; a new size
  // ends the phase at a step boundary (regroup_), and the job thread goes
  // on from the nodes' memory with it (master_attempts.cc).
  struct BucketPlan {
    bool armed = false;
    BucketSizing sizing;
    std::optional<BucketChoice> choice;
  };
  void size_buckets_locked(const std::vector<PaceReport>& pace, const std::vector<LinkReport>& links)
      REQUIRES(phase_mu_);
  // The decision's line once, for the job's progress (empty: none new).
  std::string take_bucket_note();
  Mutex bucket_note_mu_;
  std::string bucket_note_ GUARDED_BY(bucket_note_mu_);
  std::atomic<bool> bucket_note_ready_{false};  // bucket_note_ holds a line not yet taken

  // The job thread's: what each member kept when the last training phase ended (by rank).
  std::map<int, KeptSteps> kept_by_node_;
  // The job thread's: how many pieces each member of the last training
  // phase copies to the next (its PlanAck; node 0's own), by rank.
  std::map<int, int> replica_pieces_;
  // The job thread's: the members of that phase, in plan order (the ring
  // its replicas went around: each node's to the next).
  std::vector<int> replica_ring_;
  // The job thread's: the model node 0 gathered last (gather_pieces), whole.
  struct Gathered {
    int64_t job = -1, step = -1;
    std::map<std::string, std::vector<float>> values, state;
  };
  std::optional<Gathered> gathered_;
  // Nodes the running live job could not take back (its layout splits
  // variables), by rank, with the agent's incarnation then: a phase leaves
  // them out until that node's agent joins again.
  std::map<int, int64_t> refused_back_ GUARDED_BY(phase_mu_);

  // Shared by the loop thread and the job thread.
  Mutex phase_mu_;
  CondVar phase_cv_;
  PhaseState phase_ GUARDED_BY(phase_mu_);
  BucketPlan buckets_ GUARDED_BY(phase_mu_);
  NodeRuntime* local_runtime_ GUARDED_BY(phase_mu_) = nullptr;
  bool stopping_ GUARDED_BY(phase_mu_) = false;  // told to shut down; no phase starts
};

}  // namespace rill::agent_internal
