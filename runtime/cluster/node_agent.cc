// A node's agent (runtime/cluster/node_agent.h): joining, heartbeats, the
// master's liveness, and the master's messages (plans, starts, aborts,
// holds, ends, shutdowns, rejoined peers).
#include "runtime/cluster/agent.h"
#include "runtime/cluster/node_agent.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "base/printable.h"
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/checkpoint/checkpoint_collector.h"
#include "runtime/checkpoint/checkpoint_pieces.h"
#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/memory_pieces.h"
#include "runtime/cluster/memory_transfer.h"
#include "runtime/node/carried_state.h"
#include "runtime/node/node_runtime.h"

namespace rill::agent_internal {

namespace {

// How long the control link up to the master may stay closed before the
// master counts as gone: ZeroMQ reconnects every 100 ms, so a master whose
// process lives (a connection dropped by a peer's error) is back well
// within it, even on a loaded machine.
constexpr std::chrono::milliseconds kMasterGoneGrace{2000};

// This node's plan of a phase, compiled from what the master sent: the ids
// agree with every other node's plan (compiler::CompileOptions::node).
StatusOr<std::string> compile_part(const ctl::PlanPart& part, int node, int world, const AllowedRoots& roots,
                                   const std::string& where) {
  auto job = graph::parse_job_json(part.job_text, "the job from the master");
  if (!job.ok()) return job.status();
  RILL_RETURN_IF_ERROR(check_job_paths(*job, "", roots, where, false));  // this node's own roots
  auto cluster = compiler::parse_devices(part.devices, world);
  if (!cluster.ok()) return cluster.status();
  if (part.mode != static_cast<int>(compiler::Mode::kTrain) && part.mode != static_cast<int>(compiler::Mode::kEval))
    return invalid_argument("the master sent compile mode {}, expected 0 (train) or 1 (eval)", part.mode);
  compiler::CompileOptions options;
  options.mode = static_cast<compiler::Mode>(part.mode);
  options.steps = part.steps;
  options.activation_register_num = part.activation_register_num;
  options.node = node;
  options.data_access = roots.data_access();
  return compiler::compile(*job, *cluster, options);
}

}  // namespace

std::shared_ptr<CheckpointCollector> NodeAgent::checkpoint_collector(const graph::Job& job,
                                                                      std::vector<SnapshotPiece> pieces,
                                                                      int64_t job_id, int phase, int node, int nodes,
                                                                      int link) {
  if (pieces.empty()) return std::shared_ptr<CheckpointCollector>();  // this node holds none to write
  // Each node writes its own file; the master makes the step complete.
  return std::make_shared<CheckpointCollector>(
      job, std::move(pieces),
      node_file_writer(job, node, nodes, roots_.checkpoint_access(), &disk_, options_.checkpoint_write_delay_s),
      [this, job_id, phase, node, link](NodeCheckpoint written) {
        if (links_.load() != link) return;  // its master is gone from this link

        ctl::CheckpointWritten m{job_id, phase, written.step, node, std::move(written.file.file), written.file.bytes,
                                 {}, written.status.ok() ? "" : written.status.message(), written.status.code(),
                                 written.block_seconds, written.write_seconds};
        for (TensorPiece& p : written.file.pieces)
          m.pieces.push_back(ctl::CheckpointPiece{std::move(p.tensor), std::move(p.logical), std::move(p.offset),
                                                  std::move(p.shape), p.dtype});
        post_to_master(m);
      });
}

NodeAgent::~NodeAgent() {
  builder_.reset();  // what is queued runs (a stopped run ends at once)
  runner_.reset();
}

Status NodeAgent::start_kind() {
  builder_ = std::make_unique<SerialExecutor>();
  runner_ = std::make_unique<SerialExecutor>();
  master_seen_ = now();
  last_heartbeat_ = now();
  return {};
}

void NodeAgent::finish() {
  builder_.reset();  // what is queued runs (a stopped run ends at once)
  runner_.reset();
}

void NodeAgent::post_to_master(const ctl::Message& m) { post(Outgoing{true, "", ctl::encode(m)}); }

// Joins the cluster: sends its Join and waits for the master's verdict, by
// the deadline (on the agent's clock).
Status NodeAgent::join() {
  const auto deadline = now() + seconds_of(options_.join_timeout_s);
  const std::string me = this->me();
  std::string version = options_.version.empty() ? ctl::kRillVersion : options_.version;
  // Where it listens, when not at its entry of the list.
  const std::string address = options_.away() ? format_machine(options_.at) : std::string();
  post(Outgoing{true, "", ctl::encode(ctl::Join{options_.rank, version, ctl::schema_hash(), address,
                                                options_.devices, own_session(),
                                                machine_list(options_.machines)})});
  while (now() < deadline) {
    flush();  // the Join, or what a full queue held back
    ControlChannel::Incoming in;
    const bool got = channel_->receive(std::chrono::milliseconds(50), &in);
    if (const std::string failure = channel_->master_failure(); !failure.empty())
      return Status(Code::kPermissionDenied, fmt::format("{}: cannot join: {}", me, failure));
    // A master gone before it answered (killed as the cluster formed): a
    // new process on its port would not have this node's Join anyway.
    if (channel_->master_closed(kMasterGoneGrace))
      return Status(Code::kUnavailable, fmt::format("{}: the master {} is lost: its control connection closed, and its "
                                                    "port refuses, before it answered this node's join",
                                                    me, node_name(options_.machines, 0)));
    if (!got) continue;
    if (!in.from_master) {  // a status query while joining
      send_router(in.identity,
                  ctl::encode(ctl::StatusReply{nlohmann::json{{"state", "joining"}, {"rank", options_.rank}}.dump()}));
      continue;
    }
    auto message = ctl::decode(in.bytes);
    if (!message.ok()) return message.status().with_context(me + ": from the master");
    if (auto* r = std::get_if<ctl::JoinReply>(&*message)) {
      if (!r->ok) return Status(Code::kAborted, fmt::format("{}: the cluster did not form: {}", me, r->error));
      if (r->world != world_)
        return Status(Code::kInvalidArgument,
                      fmt::format("{}: the master's cluster has {} node(s) but this agent's machine list names {}: "
                                  "start every agent with the same --machines",
                                  me, r->world, world_));
      if (r->data_sessions.size() != own_session().size() * static_cast<size_t>(world_))
        return Status(Code::kDataLoss, fmt::format("{}: the master's answer carries {} bytes of data-plane session "
                                                   "ids, not {}",
                                                   me, r->data_sessions.size(), own_session().size() * world_));
      // Where the others listen now (an agent may have taken a node's place
      // at another address), before their sessions dial them.
      if (!r->data_endpoints.empty() && r->data_endpoints.size() != static_cast<size_t>(world_))
        return Status(Code::kDataLoss, fmt::format("{}: the master's answer carries {} data ports, not {}", me,
                                                   r->data_endpoints.size(), world_));
      for (int peer = 0; peer < static_cast<int>(r->data_endpoints.size()); ++peer)
        RILL_RETURN_IF_ERROR(move_peer(peer, r->data_endpoints[peer])
                                 .with_context(fmt::format("{}: {}", me, node_name(options_.machines, peer))));
      set_sessions(r->data_sessions);
      master_seen_ = now();
      forget_stale_losses();
      spdlog::info("{}: joined a cluster of {} node(s)", me, r->world);
      return {};
    }
  }
  return Status(Code::kDeadlineExceeded,
                fmt::format("{}: the master {} did not form the cluster within {} s (is it running and reachable, "
                            "and does it list this node?)",
                            me, node_name(options_.machines, 0), options_.join_timeout_s));
}

// Heartbeats to the master, with the running phase's pace, and the master's
// liveness.
void NodeAgent::tick() {
  if (seconds_since(last_heartbeat_) >= options_.heartbeat_s) {
    last_heartbeat_ = now();
    ctl::Heartbeat beat{options_.rank};
    links_window_.add(clock_seconds(), transport_->link_counters());
    {
      MutexLock lock(run_mu_);
      if (running_) {
        const NodePace pace = running_->pace();
        beat = ctl::Heartbeat{options_.rank, running_job_, running_phase_, pace.steps, pace.busy_seconds};
        for (const NodePace::Thread& t : pace.threads) beat.threads.push_back({t.name, t.acts, t.busy_seconds, t.queued});
        beat.received_bytes_from = transport_->received_bytes_from();
        beat.link_rates = links_window_.rates();
        beat.comm = pace.comm;
      }
    }
    beat.checkpoint_bytes = disk_.bytes();  // also between runs: a run's last files are written after it
    beat.checkpoint_step = disk_.step();
    post_to_master(beat);
  }
  watch_links();
  // The control link closed and its reconnects refused: the master's
  // process is gone, even where the data connection to it was never up (a
  // master lost just after the cluster formed), which the data plane
  // cannot report.
  const bool control_closed = channel_->master_closed(kMasterGoneGrace);
  if (told_to_join_again_.empty()) {
    if (!transport_->peer_lost(0) && !control_closed && seconds_since(master_seen_) < options_.dead_after_s) return;
    // What the master said before its connection closed comes first: a
    // Shutdown, then the close, is not a lost master.
    handle_incoming(std::chrono::milliseconds(0));
    if (shutdown_) return;
  }
  if (!told_to_join_again_.empty()) return join_again(std::exchange(told_to_join_again_, {}));
  // A connection the data plane gave up on (--link-timeout) is a cut link,
  // with the master perhaps up behind it.
  const double silent = seconds_since(master_seen_);
  const bool data_closed = closed_while_heard(0, master_seen_), closed = data_closed || control_closed;
  const std::string lost = fmt::format(
      "{}: the master {} is lost: {}", me(), node_name(options_.machines, 0),
      data_closed      ? std::string("its connection closed")
      : control_closed ? std::string("its control connection closed, and its port refuses")
                       : fmt::format("no heartbeat for {:g} s", std::floor(silent * 10) / 10));
  {
    MutexLock lock(run_mu_);
    pending_.reset();
    pending_checkpoint_.reset();
    pending_replicator_.reset();
    if (running_) running_->abort(Status(Code::kUnavailable, lost));
  }
  if (closed) {  // its process is gone: so is the cluster
    fatal_ = Status(Code::kUnavailable, lost);
    shutdown_ = true;
    return;
  }
  join_again(lost);
}

// The master went silent but did not close its connection (a link is down,
// or its machine), or it declared this node lost (this node or its link
// was silent). This agent stays, joins again once the master answers
// (within the join timeout), and the master takes it as a restarted node
// (a job with restarts goes on); else it ends, saying both.
void NodeAgent::join_again(const std::string& lost) {
  spdlog::warn("{}; joining again, for up to {:g} s", lost, options_.join_timeout_s);
  // Work begun on the old link reports nothing on the new one (a plan
  // being built, a run queued or ending): the master it was for has
  // declared this node lost, or is another process. The runner starts a
  // phase only under run_mu_ and on the link it was started on, so after
  // this block no phase of the old link begins, and the one running stops.
  {
    MutexLock lock(run_mu_);
    links_.fetch_add(1);
    if (running_) running_->abort(Status(Code::kAborted, lost));
    pending_.reset();
    pending_checkpoint_.reset();
    pending_replicator_.reset();
    pending_job_ = aborted_job_ = started_job_ = -1;
    pending_phase_ = aborted_phase_ = started_phase_ = -1;
    started_.reset();
  }
  last_part_ = {-1, -1};
  // The aborted phase ends first, then what was queued for the master is
  // dropped with the old link.
  for (int i = 0; i < 500; ++i) {
    {
      MutexLock lock(run_mu_);
      if (!running_) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  drop_queued_to_master();
  channel_->reconnect_master();
  if (Status joined = join(); !joined.ok()) {
    fatal_ = Status(Code::kUnavailable, fmt::format("{}; then {}", lost, joined.message()));
    shutdown_ = true;
    return;
  }
  last_heartbeat_ = now();
}

// Nodes and clients reach a node's port only to ask its status.
void NodeAgent::on_port_message(const std::string& identity, const std::string& bytes) {
  auto message = ctl::decode(bytes);
  if (!message.ok()) {
    spdlog::warn("{}: ignoring a corrupt control message from '{}': {}", me(), printable_name(identity),
                 message.status().message());
    return;
  }
  if (!std::holds_alternative<ctl::StatusRequest>(*message)) return;
  const std::string reply = nlohmann::json{{"state", "up"}, {"rank", options_.rank},
                                           {"master", format_machine(options_.machines[0])}}.dump();
  send_router(identity, ctl::encode(ctl::StatusReply{reply}));
}

void NodeAgent::on_master_message(const std::string& bytes) {
  master_seen_ = now();
  auto message = ctl::decode(bytes);
  if (!message.ok()) {
    // What it said is lost: the master stops the running job, naming the link.
    std::string reason = fmt::format("the control link from the master to {}: {}", me(), message.status().message());
    spdlog::error("{}", reason);
    post_to_master(ctl::LinkError{options_.rank, reason});
    return;
  }
  std::visit([&](auto& m) { worker_on(m); }, *message);
}

void NodeAgent::worker_on(ctl::PlanPart& m) {
  const std::string me = node_name(options_.machines, options_.rank);
  // A repeated message (the master sends each phase once) must not
  // build a second runtime on the same tags.
  if (m.job_id == last_part_.first && m.phase == last_part_.second) {
    spdlog::warn("{}: ignoring a repeated plan of job {} phase {}", me, m.job_id, m.phase);
    return;
  }
  last_part_ = {m.job_id, m.phase};
  RunOptions run;
  run.data_access = roots_.data_access();
  run.tag_base = m.tag_base;
  run.stall_timeout_s = options_.stall_timeout_s;
  run.liveness = liveness();
  run.describe_liveness = [this] { return disk_.describe(); };
  std::vector<std::string> variables;
  std::map<std::string, Shape> shapes;  // bound what a replica may weigh
  auto job = graph::parse_job_json(m.job_text, "the job from the master");
  if (job.ok()) {
    run.stall_timeout_s = job_stall_timeout_s(*job, options_.stall_timeout_s);
    for (const graph::Variable& v : job->variables) variables.push_back(v.name);
    shapes = model_shapes(*job);
  }
  // Which node of the plan this is, and what it starts from (the
  // survivors of a lost node go on from their own memory).
  int nodes = world_;
  if (Status placed =
          place_run(m.job_id, m.members, m.keep_steps, m.kept_step, m.start_step, std::move(variables), run, &nodes);
      !placed.ok()) {
    post_to_master(ctl::PlanAck{m.job_id, m.phase, options_.rank, fmt::format("{}: {}", me, placed.message()),
                                placed.code()});
    return;
  }
  const int node = run.node;
  for (ctl::Tensor& t : m.initial_values) run.initial_values[t.name] = std::move(t.values);
  for (ctl::Tensor& t : m.initial_state) run.initial_state[t.name] = std::move(t.values);
  run.start_step = m.start_step;
  run.trace = m.trace;
  run.max_control_message_bytes = options_.max_message_bytes;
  run.snapshot_every = m.snapshot_every;
  std::optional<graph::Job> checkpointed;  // the job, when it checkpoints
  if (m.snapshot_every >= 0 && job.ok()) checkpointed = std::move(*job);
  // Compiled and built off the loop, which keeps answering
  // heartbeats meanwhile (a dataset may take long to read); the ack
  // goes out when it is done.
  builder_->post([this, me, node, nodes, part = std::move(m), run = std::move(run), link = links_.load(),
                  checkpointed = std::move(checkpointed), shapes = std::move(shapes)]() mutable {
    if (links_.load() != link) return;  // asked on a link since replaced (join_again)
    // A node that comes back: node 0's memory first, over the data plane.
    if (Status memory = take_memory(part, run); !memory.ok()) {
      if (links_.load() != link) return;
      post_to_master(ctl::PlanAck{part.job_id, part.phase, options_.rank, fmt::format("{}: {}", me, memory.message()),
                                  memory.code()});
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    auto plan = compile_part(part, node, nodes, roots_, me);
    if (plan.ok())
      spdlog::info("job {} phase {}: compiled this node's plan ({} bytes) in {:.3f} s", part.job_id,
                   part.phase, plan->size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::shared_ptr<CheckpointCollector> checkpoint;
    std::vector<ctl::CheckpointPiece> carried;  // the master learns of them with the ack
    if (plan.ok() && checkpointed) {
      auto pieces = snapshot_pieces(*plan);
      if (pieces.ok()) {
        for (const SnapshotPiece& piece : *pieces)
          if (piece.name.starts_with(kCarriedPrefix))
            carried.push_back(ctl::CheckpointPiece{piece.name, {}, piece.offset, {}});
        checkpoint = checkpoint_collector(*checkpointed, std::move(*pieces), part.job_id, part.phase, node, nodes,
                                          link);
      } else {
        plan = pieces.status();
      }
    }
    if (checkpoint) {
      run.on_snapshot = [checkpoint](int64_t done, VariablePiece piece) { checkpoint->add(done, std::move(piece)); };
      run.on_abort = [checkpoint] { checkpoint->abandon(); };
    }
    // Its pieces to the next members' memory every few steps (live membership).
    std::shared_ptr<Replicator> replicator;
    int replica_pieces = 0;
    if (plan.ok() && part.mode == static_cast<int>(compiler::Mode::kTrain)) {
      auto made = replicate(part.job_id, part.phase, part.members, part.replica_every, part.replica_copies, *plan,
                            run, nodes, shapes, part.start_step + part.steps, &replica_pieces);
      if (made.ok()) replicator = std::move(*made);
      else plan = made.status();
    }
    auto built = plan.ok() ? NodeRuntime::build(std::move(*plan), std::move(run))
                           : StatusOr<std::unique_ptr<NodeRuntime>>(plan.status());
    std::string error = built.ok() ? "" : fmt::format("{}: {}", me, built.status().message());
    {
      MutexLock lock(run_mu_);
      if (links_.load() != link) return;
      if (built.ok() && !(aborted_job_ == part.job_id && part.phase <= aborted_phase_)) {
        pending_ = std::move(*built);
        pending_checkpoint_ = std::move(checkpoint);
        pending_replicator_ = std::move(replicator);
        pending_job_ = part.job_id;
        pending_phase_ = part.phase;
        // Count this job's traffic from here: the master starts
        // sending once every node has acked, possibly before our
        // Start arrives.
        transport_->reset();
      }
    }
    post_to_master(ctl::PlanAck{part.job_id, part.phase, options_.rank, error,
                                 built.ok() ? Code::kOk : built.status().code(), std::move(carried),
                                 replica_pieces});
  });
}

// A traced run's acts go back with its Done, unless they would not fit in
// a control message beside its variables (then the master's timeline lacks
// this node, and the log says why).
void NodeAgent::add_traces(std::vector<ActorTraceRecord>& traces, ctl::Done* done) const {
  size_t bytes = 0;
  for (const ActorTraceRecord& t : traces)
    bytes += t.name.size() + t.collective.size() + 64 +
             8 * (t.trace.begin_ns.size() + t.trace.end_ns.size() + t.trace.done_ns.size());
  for (const ctl::Tensor& v : done->variables) bytes += 4 * v.values.size() + v.name.size() + 64;
  if (bytes > options_.max_message_bytes / 2) {
    spdlog::warn("{}: the trace of job {} ({} bytes) does not fit in a control message (--max-message-bytes {}): "
                 "not sent",
                 me(), done->job_id, bytes, options_.max_message_bytes);
    return;
  }
  for (ActorTraceRecord& t : traces)
    done->traces.push_back(ctl::ActTrace{t.id, std::move(t.name), t.acts_per_step, std::move(t.collective),
                                         std::move(t.trace.begin_ns), std::move(t.trace.end_ns),
                                         std::move(t.trace.done_ns)});
}

void NodeAgent::worker_on(ctl::Start& m) {
  std::shared_ptr<NodeRuntime> runtime;
  std::shared_ptr<CheckpointCollector> checkpoint;
  std::shared_ptr<Replicator> replicator;
  {
    MutexLock lock(run_mu_);
    if (!pending_ || pending_job_ != m.job_id || pending_phase_ != m.phase) return;
    runtime = std::move(pending_);
    checkpoint = std::move(pending_checkpoint_);
    replicator = std::move(pending_replicator_);
    started_ = runtime;
    started_job_ = m.job_id;
    started_phase_ = m.phase;
  }
  // After the previous run has wound down, on the runner's thread.
  runner_->post([this, job = m.job_id, phase = m.phase, runtime = std::move(runtime), checkpoint = std::move(checkpoint),
                 replicator = std::move(replicator), link = links_.load()]() mutable {
    {
      MutexLock lock(run_mu_);
      if (links_.load() != link) return;  // started on a link since replaced
      running_ = runtime.get();
      running_job_ = job;
      running_phase_ = phase;
    }
    RunReport report = runtime->run();
    {
      MutexLock lock(run_mu_);
      running_ = nullptr;
    }
    // A run that ended well leaves its last step's copies in place (a loss
    // after the training goes on from them); others end with the run (the
    // store keeps those complete), before the runtime, which they read
    // through, goes.
    if (replicator && report.status.ok() && report.whole_plan) replicator->finish(report.steps);
    if (replicator) replicator->stop();
    replicator.reset();
    runtime.reset();  // unhooks the transport handler before the next job
    // This node's last checkpoint files are written and reported before its
    // Done (the master completes the steps from them). A write that failed
    // was reported; a run that failed leaves its unfinished step unwritten.
    if (checkpoint) (void)checkpoint->finish();
    checkpoint.reset();
    if (links_.load() != link) return;  // its master is gone from this link: nobody waits for its Done
    ctl::Done done{job,
                   phase,
                   options_.rank,
                   report.status.ok() ? "" : report.status.message(),
                   {},
                   report.seconds,
                   transport_->received_from(),
                   transport_->received_bytes_from(),
                   report.status.code()};
    tell_kept(done);
    // The record goes along where it fits comfortably in the control
    // message (its callers grow with the plan's cross-node boxings).
    if (report.comm_record.size() <= kMaxRecordBytes) done.comm = std::move(report.comm_record);
    // They fit: the plan was refused otherwise (max_control_message_bytes).
    if (done.error.empty())
      for (VariablePiece& p : report.pieces)
        done.variables.push_back(ctl::Tensor{p.name, p.logical_shape, p.offset, p.shape, std::move(p.values)});
    add_traces(report.traces, &done);
    post_to_master(done);
  });
}

void NodeAgent::worker_on(ctl::Abort& m) {
  MutexLock lock(run_mu_);
  // A plan still being made for it is dropped; a restarted attempt's
  // later phases are not.
  aborted_job_ = m.job_id;
  aborted_phase_ = m.phase;
  if (pending_job_ == m.job_id && pending_phase_ <= m.phase)
    pending_.reset(), pending_checkpoint_.reset(), pending_replicator_.reset();
  if (running_ && running_job_ == m.job_id && running_phase_ <= m.phase)
    running_->abort(Status(Code::kAborted, m.reason));
  // A part still taking node 0's memory for that phase, or sending it its
  // pieces, stops waiting.
  if (auto base = run_tag_base(m.job_id, m.phase); base.ok())
    transport_->cancel_tags(*base + kGatherAckTag, *base + kTagsPerRun, m.reason);
}

// The end of the cluster, or (join_again) the master's word that it took
// this node for lost: tick() then joins again on a new control link.
void NodeAgent::worker_on(ctl::Shutdown& m) {
  const std::string me = node_name(options_.machines, options_.rank);
  MutexLock lock(run_mu_);
  if (running_) running_->abort(Status(Code::kAborted, m.reason.empty() ? "the agent is shutting down" : m.reason));
  if (m.join_again) {
    told_to_join_again_ = m.reason.empty() ? "the master declared " + me + " lost" : m.reason;
    return;
  }
  if (!m.reason.empty()) fatal_ = Status(Code::kAborted, fmt::format("{}: {}", me, m.reason));
  shutdown_ = true;
}

void NodeAgent::worker_on(ctl::Hold& m) {
  // Where this node is; a phase that ended here already does not
  // hold the others back (the master keeps the end within the plan).
  std::shared_ptr<NodeRuntime> runtime;
  {
    MutexLock lock(run_mu_);
    runtime = runtime_of_locked(m.job_id, m.phase);
  }
  const int64_t last = runtime ? runtime->hold() : std::numeric_limits<int64_t>::max() / 2;
  post_to_master(ctl::Held{m.job_id, m.phase, options_.rank, last});
}

void NodeAgent::worker_on(ctl::EndAt& m) {
  const std::string me = node_name(options_.machines, options_.rank);
  std::shared_ptr<NodeRuntime> runtime;
  {
    MutexLock lock(run_mu_);
    runtime = runtime_of_locked(m.job_id, m.phase);
  }
  if (runtime) runtime->end_at(m.end);
  spdlog::info("{}: job {} phase {} ends at step {} (a stop was asked for)", me, m.job_id, m.phase, m.end);
}

void NodeAgent::worker_on(ctl::Rejoined& m) {
  const std::string me = node_name(options_.machines, options_.rank);
  if (m.node <= 0 || m.node >= world_ || m.node == options_.rank) {
    spdlog::error("{}: the master says node {} joined again, which is not another node of the list: ignored", me,
                  m.node);
    return;
  }
  if (!own_session().empty() && m.data_session.size() != own_session().size()) {
    spdlog::error("{}: the master says {} joined again, with a data-plane session id of {} bytes: ignored", me,
                  node_name(options_.machines, m.node), m.data_session.size());
    return;
  }
  if (!m.data_endpoint.address.empty()) {
    if (Status moved = move_peer(m.node, m.data_endpoint); !moved.ok()) {
      // Its new process cannot be reached from here: whatever runs with it
      // cannot either. The master stops it, naming why.
      std::string reason = fmt::format("the master says {} listens at {}:{}, which {} cannot reach: {}",
                                       node_name(options_.machines, m.node), m.data_endpoint.address,
                                       m.data_endpoint.port, me, moved.message());
      spdlog::error("{}", reason);
      post_to_master(ctl::LinkError{options_.rank, std::move(reason)});
      return;
    }
  }
  if (!own_session().empty()) {
    comm::SessionId id;
    std::memcpy(id.data(), m.data_session.data(), id.size());
    transport_->set_peer_session(m.node, id);
  }
  transport_->revive(m.node);
  spdlog::info("{}: {} joined again", me, node_name(options_.machines, m.node));
}

// The master's heartbeat: on_master_message noted that it is alive.
// The master's: what the cluster's checkpoint writers have written.
void NodeAgent::worker_on(ctl::Heartbeat& m) {
  cluster_disk_.store(static_cast<uint64_t>(m.checkpoint_bytes), std::memory_order_relaxed);
}

// The cluster formed in join(); another answer to the Join is stale.
void NodeAgent::worker_on(ctl::JoinReply&) {}

// What nodes and clients send and only the master takes: the master never
// sends one, so one arriving here is logged and dropped.
void NodeAgent::worker_on(ctl::Join&) { not_for_node("Join"); }
void NodeAgent::worker_on(ctl::Submit&) { not_for_node("Submit"); }
void NodeAgent::worker_on(ctl::SubmitReply&) { not_for_node("SubmitReply"); }
void NodeAgent::worker_on(ctl::PlanAck&) { not_for_node("PlanAck"); }
void NodeAgent::worker_on(ctl::Done&) { not_for_node("Done"); }
void NodeAgent::worker_on(ctl::CheckpointWritten&) { not_for_node("CheckpointWritten"); }
void NodeAgent::worker_on(ctl::Progress&) { not_for_node("Progress"); }
void NodeAgent::worker_on(ctl::Result&) { not_for_node("Result"); }
void NodeAgent::worker_on(ctl::StatusRequest&) { not_for_node("StatusRequest"); }
void NodeAgent::worker_on(ctl::StatusReply&) { not_for_node("StatusReply"); }
void NodeAgent::worker_on(ctl::LinkError&) { not_for_node("LinkError"); }
void NodeAgent::worker_on(ctl::Stop&) { not_for_node("Stop"); }
void NodeAgent::worker_on(ctl::Held&) { not_for_node("Held"); }

void NodeAgent::not_for_node(const char* type) {
  spdlog::warn("{}: dropped a {} from the master: only nodes and clients send it",
               node_name(options_.machines, options_.rank), type);
}

std::shared_ptr<NodeRuntime> NodeAgent::runtime_of_locked(int64_t job, int phase) {
  if (pending_ && pending_job_ == job && pending_phase_ == phase) return pending_;
  if (started_job_ == job && started_phase_ == phase) return started_.lock();
  return nullptr;
}

}  // namespace rill::agent_internal
