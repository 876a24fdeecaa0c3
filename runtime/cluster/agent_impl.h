// The agent's internals: the base every agent is (its channel, transport,
// outbox and loop). The master and the other nodes' agents are its kinds
// (runtime/cluster/master.h, runtime/cluster/node_agent.h). Not a public
// header: use runtime/cluster/agent.h.
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
#include "runtime/cluster/job_runner.h"
#include "runtime/cluster/replica_store.h"
#include "runtime/cluster/replicator.h"
#include "runtime/checkpoint/write_progress.h"
#include "comm/group_transport.h"
#include "runtime/node/node_runtime.h"
#include "runtime/node/step_keeper.h"

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
  // >= 0: to that node, whose identity the loop thread looks up when it
  // sends (threads other than the loop never read the master's table).
  int node = -1;
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

// What every agent is: its options and clock, its control channel and data
// transport, what it sends (posted from any thread, sent by the loop without
// blocking, kept while a peer's queue is full), and its loop, which hands
// what comes in to the kind of agent it is (Master, runtime/cluster/
// master.h; NodeAgent, runtime/cluster/node_agent.h).
class Agent {
 public:
  explicit Agent(AgentOptions options);
  virtual ~Agent();
  // Checks the options, opens the channel and the data plane.
  Status start();
  // Forms the cluster (the master), or joins it (a node), by the deadline.
  virtual Status join() = 0;
  // Handles messages until told to shut down; the first fatal error.
  Status serve();

 protected:
  // The loop's time (AgentOptions::clock).
  Clock::time_point now() const { return clock_->now(); }
  double seconds_since(Clock::time_point t) const { return std::chrono::duration<double>(now() - t).count(); }
  double clock_seconds() const { return std::chrono::duration<double>(now().time_since_epoch()).count(); }
  std::string me() const { return node_name(options_.machines, options_.rank); }

  // The kind's part of start(), after the channel and transport are open.
  virtual Status start_kind() = 0;
  // A message on the control port (from a node or a client), or on the
  // link up to the master.
  virtual void on_port_message(const std::string& identity, const std::string& bytes) = 0;
  virtual void on_master_message(const std::string& bytes) = 0;
  // Once a turn of the loop, after what came was handled: heartbeats,
  // liveness, jobs.
  virtual void tick() = 0;
  // The node whose agent has routing identity `identity` (-1: a client),
  // and the other way (loop thread).
  virtual int node_of(const std::string& identity) const = 0;
  virtual std::string identity_of(int node) const = 0;
  // After the loop: the threads the kind runs end.
  virtual void finish() = 0;

  // Handles what has come, up to kMessagesPerTurn messages, waiting up to
  // `wait` for the first (loop thread).
  void handle_incoming(std::chrono::milliseconds wait);
  void post(Outgoing out);
  void flush();
  // Forgets every message posted or held back for the master (its link is
  // being replaced: runtime/cluster/control_channel.h, reconnect_master).
  void drop_queued_to_master();
  // Sends `out` now; false when its peer's queue is full (ZeroMQ's
  // high-water mark: nothing was sent). Too large a message, or one to a
  // client that does not read its answers, is logged and dropped.
  bool send_now(const Outgoing& out);
  // Sends, or keeps for the next flush behind what is kept for the same
  // peer: control messages between agents are never dropped while their peer
  // lives (a node declared lost loses what was kept for it).
  void deliver(Outgoing out);
  bool router_send_now(const std::string& identity, const std::string& bytes);
  void send_router(const std::string& identity, const std::string& bytes);
  // A process that held a rank before the cluster formed (an agent refused
  // at the handshake, one that exited and was started again) left its data
  // connection lost; every rank now is the one that joined.
  void forget_stale_losses();
  // Notes, on each turn of the loop, when each peer's data connection was
  // last seen up.
  void watch_links() {
    for (int r = 0; r < world_; ++r)
      if (!transport_->peer_lost(r)) link_up_[r] = now();
  }
  // Whether the data connection to `peer` closed while its heartbeats still
  // came (last heard at `heard`): its process is gone. One that timed out
  // after --link-timeout of silence closed too, but that is a silent link,
  // whose far side may be up. The silence counted is the one before the
  // connection was last seen up, so a loop slow to look counts less of it,
  // never more: in doubt, a closed connection.
  bool closed_while_heard(int peer, Clock::time_point heard) const {
    return transport_->peer_lost(peer) &&
           std::chrono::duration<double>(link_up_[peer] - heard).count() < options_.link_timeout_s / 2;
  }
  // The data plane's session ids (comm/transport.h) as the control plane
  // carries them: this node's (empty for an in-process data plane), and
  // every node's, by rank, given to the transport (an empty text gives
  // nothing).
  std::string own_session() const;
  void set_sessions(const std::string& all);
  // What is wrong with a peer's session id, or "".
  std::string session_error(const std::string& session) const;
  // Rank `rank`'s data port is at `endpoint` now (an agent that took its
  // place at another address, or came back to its own): the data plane
  // sends there from now on. Nothing where it is there already.
  Status move_peer(int rank, const comm::Endpoint& endpoint);
  // Every node's data port as listed (its control port + 1).
  static std::vector<comm::Endpoint> listed_data_endpoints(const std::vector<Machine>& machines);

  AgentOptions options_;
  int world_;
  std::shared_ptr<const AgentClock> clock_;
  std::unique_ptr<ControlChannel> channel_;
  AllowedRoots roots_;  // set by start(); read-only after
  std::unique_ptr<comm::CountingTransport> transport_;
  bool shutdown_ = false;  // loop thread
  Status fatal_;           // loop thread
  std::deque<Outgoing> backlog_;  // loop thread: held back by full queues, in order
  std::vector<bool> unreachable_warned_;  // loop thread: a node a message could not reach, warned once
  std::vector<Clock::time_point> link_up_;  // loop thread: each peer's data connection last seen up (watch_links)
  std::vector<comm::Endpoint> data_endpoints_;  // loop thread: every node's data port now (move_peer)

  // Live membership (docs/CLUSTER.md): a plan on `members` of the machine
  // list's ranks (empty: all, node n = rank n). Sets `run`'s node and data
  // plane, and the memory it keeps (`keep_steps`) and starts from
  // (`kept_step` >= 0: the values this node kept of job `job` after that
  // many steps), its run beginning after `start_step` steps;
  // `nodes` is told how many nodes the plan spans. `variables`: the job's,
  // which a whole model has. Called between runs (the last one ended).
  Status place_run(int64_t job, const std::vector<int>& members, bool keep_steps, int64_t kept_step,
                   int64_t start_step, std::vector<std::string> variables, RunOptions& run, int* nodes);
  // What this node kept of its last run (steps, whole, replicas) for its Done.
  void tell_kept(ctl::Done& done) const;
  // A run that copies this node's pieces to the next `copies` members'
  // memory every `every` steps (> 0, a training of several nodes): its
  // Replicator, the run's options told of it (`run` placed already), and
  // how many pieces the node copies (`pieces`); null when it copies none.
  // `shapes`: the job's variables, which bound what the nodes before may
  // send; `last_step` the run's last.
  StatusOr<std::unique_ptr<Replicator>> replicate(int64_t job, int phase, const std::vector<int>& members,
                                                  int64_t every, int copies, std::string_view node_plan,
                                                  RunOptions& run, int nodes,
                                                  const std::map<std::string, Shape>& shapes, int64_t last_step,
                                                  int* pieces);
  // This node's pieces after `step` steps (when `own`), and the replicas of
  // `replicas_of` it holds, as messages for node 0's gather.
  StatusOr<std::vector<std::string>> gather_messages(int64_t job, int64_t step, bool own,
                                                     const std::vector<int>& replicas_of) const;
  // This agent's checkpoint writers' bytes, and what the master last said
  // of the cluster's (every node's, its own included): while either grows, a
  // node waits for a disk, so nobody's run is stuck (write_progress.h).
  WriteProgress disk_;
  std::atomic<uint64_t> cluster_disk_{0};  // as said: any value (a sum wraps, comm/liveness.h)
  comm::Liveness liveness() {
    return [this] { return static_cast<uint64_t>(disk_.bytes()) + cluster_disk_.load(std::memory_order_relaxed); };
  }
  StepKeeper kept_;  // the running job's last two steps; one run at a time writes it
  ReplicaStore replicas_;  // this node's pieces and the nodes before it's, every few steps

 private:
  // The control channel: options_.control_channel's, or ZeroMQ's; with
  // options_.fault, wrapped to inject it.
  Status open_channel();

  // Control messages the loop handles in one turn, at most, before it looks
  // at liveness, jobs and what it has to send.
  static constexpr int kMessagesPerTurn = 64;
  // How long the loop waits for a message when nothing is due: posts wake
  // it at once (ControlChannel::wake), so this bounds only how late a timer
  // (a heartbeat, a liveness check, the metrics) is, and the loop's idle
  // wakeups (10 a second).
  static constexpr std::chrono::milliseconds kIdleWait{100};
  Mutex out_mu_;
  std::vector<Outgoing> outbox_ GUARDED_BY(out_mu_);
  int64_t unread_answers_dropped_ = 0;     // loop thread: since the last warning
  // The data plane seen by a plan on some of the ranks, by its members; one
  // per membership a job has had (at most one per lost node), kept while the
  // agent lives.
  Mutex groups_mu_;
  std::map<std::vector<int>, std::unique_ptr<comm::GroupTransport>> groups_ GUARDED_BY(groups_mu_);
  Clock::time_point unread_answers_warned_{};
};

}  // namespace rill::agent_internal
