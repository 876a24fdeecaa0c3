#include "runtime/cluster/agent.h"
#include "runtime/cluster/agent_impl.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "comm/counting_transport.h"
#include "comm/transport.h"
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "kernels/cuda/cuda_context.h"
#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/node/node_runtime.h"
#include "runtime/node/plan_reader.h"

namespace rill::agent_internal {

Agent::~Agent() {
  if (job_thread_.joinable()) job_thread_.join();
  builder_.reset();
  runner_.reset();
  if (transport_) transport_->close();
  // Let the last control messages (Shutdown to the nodes, replies) leave,
  // but never wait long for a peer that is gone.
  server_.set(zmq::sockopt::linger, 2000);
  master_.set(zmq::sockopt::linger, 2000);
}

Status Agent::bind_ctrl() {
  const Machine& me = options_.machines[options_.rank];
  const std::string name = node_name(options_.machines, options_.rank);
  std::string endpoint = tcp_endpoint(me.address, me.ctrl_port);
  try {
    server_.set(zmq::sockopt::linger, 0);
    server_.set(zmq::sockopt::router_mandatory, 1);
    server_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_message_bytes));
    if (options_.control_send_hwm > 0) server_.set(zmq::sockopt::sndhwm, options_.control_send_hwm);
    if (options_.key) {
      auto zap = comm::ZapAuthenticator::start(context_, *options_.key, world_, true, name + ": control port");
      if (!zap.ok()) return zap.status();
      zap_ = std::move(*zap);
      comm::curve_server(server_, *options_.key, options_.rank);
      server_watch_ = std::make_unique<comm::HandshakeWatch>(
          context_, server_, fmt::format("{}: control port {}", name, format_machine(me)), true, true);
    }
    server_.bind(endpoint);
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRINUSE)
      return Status(Code::kUnavailable, fmt::format("{}: control port {} is already in use (another agent?)",
                                                    node_name(options_.machines, options_.rank), format_machine(me)));
    return Status(Code::kUnavailable, fmt::format("{}: cannot listen on {}: {}", node_name(options_.machines, options_.rank),
                                                  endpoint, e.what()));
  }
  return {};
}

Status Agent::start() {
  if (options_.rank < 0 || options_.rank >= world_)
    return invalid_argument("rank {} is outside the machine list ({} node(s): ranks 0..{})", options_.rank, world_,
                            world_ - 1);
  RILL_ASSIGN_OR_RETURN(compiler::Cluster cluster, compiler::parse_devices(options_.devices, world_));
  RILL_ASSIGN_OR_RETURN(roots_, AllowedRoots::make(options_.data_roots, options_.checkpoint_roots));
  const Machine& self = options_.machines[options_.rank];
  const bool beyond_loopback = !is_loopback_address(self.address);
  if (!options_.key && !options_.insecure && beyond_loopback)
    return invalid_argument(
        "{}: will not listen on {} without a cluster key: anyone who reaches it could run jobs here. Give the key "
        "file with --key FILE or {} (`rill keygen FILE` writes one; every agent and client needs it), or start "
        "with --insecure on a trusted network",
        node_name(options_.machines, options_.rank), format_machine(self), comm::kKeyFileEnv);
  if (options_.insecure && !options_.key && beyond_loopback)
    spdlog::warn("{}: --insecure: listening on {} without a key; anyone who reaches it can run jobs here",
                 node_name(options_.machines, options_.rank), format_machine(self));
  if (cluster.device_type == DeviceType::kCuda)
    RILL_RETURN_IF_ERROR(require_cuda_devices(cluster.devices_per_node, node_name(options_.machines, options_.rank)));
  RILL_RETURN_IF_ERROR(bind_ctrl());
  std::vector<comm::Endpoint> endpoints;
  for (const Machine& m : options_.machines) endpoints.push_back({m.address, m.ctrl_port + 1});
  comm::ZmqOptions transport_options;
  transport_options.key = options_.key;
  transport_options.max_message_bytes = options_.max_message_bytes;
  auto transport = comm::make_zmq_transport(options_.rank, endpoints, transport_options);
  if (!transport.ok())
    return transport.status().with_context(fmt::format("{}: data port", node_name(options_.machines, options_.rank)));
  transport_ = std::make_unique<comm::CountingTransport>(std::move(*transport));
  transport_->accept_tags(0, 0);  // nothing until a run's plan opens its tags
  if (!is_master()) {
    builder_ = std::make_unique<SerialExecutor>();
    runner_ = std::make_unique<SerialExecutor>();
    const Machine& m = options_.machines[0];
    master_.set(zmq::sockopt::linger, 0);
    master_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_message_bytes));
    if (options_.control_send_hwm > 0) master_.set(zmq::sockopt::sndhwm, options_.control_send_hwm);
    master_.set(zmq::sockopt::routing_id, comm::node_identity(options_.rank));
    if (options_.key) comm::curve_client(master_, *options_.key, comm::node_identity(options_.rank), 0);
    master_watch_ = std::make_unique<comm::HandshakeWatch>(
        context_, master_, fmt::format("the master {}", format_machine(m)), options_.key != nullptr);
    master_.connect(tcp_endpoint(m.address, m.ctrl_port));
  }
  if (is_master()) RILL_RETURN_IF_ERROR(start_http());
  identity_of_node_.assign(world_, "");
  last_seen_.assign(world_, Clock::now());
  lost_.assign(world_, false);
  unreachable_warned_.assign(world_, false);
  told_to_go_.assign(world_, false);
  pace_ = PaceTracker(world_);
  slow_warned_.assign(world_, false);
  activity_.assign(world_, {});
  return {};
}

// Why the master refuses a joining node ("" = it may join).
std::string Agent::join_error(const ctl::Join& j, const std::string& identity) const {
  std::string who = j.rank >= 0 && j.rank < world_ ? node_name(options_.machines, j.rank)
                                                   : fmt::format("a node claiming rank {}", j.rank);
  if (j.rank <= 0 || j.rank >= world_) return fmt::format("{} is outside the machine list ({} nodes)", who, world_);
  // With a key, receive_server has checked the identity against the key.
  if (options_.key && identity != comm::node_identity(j.rank))
    return fmt::format("a peer authenticated as '{}' asked to join as rank {}", identity, j.rank);
  if (j.version != ctl::kRillVersion || j.schema_hash != ctl::schema_hash())
    return fmt::format("{} runs Rill {} (schema {:016x}) but the master runs Rill {} (schema {:016x}): run the "
                       "same version on every node",
                       who, j.version, j.schema_hash, ctl::kRillVersion, ctl::schema_hash());
  if (j.devices != options_.devices)
    return fmt::format("{} has devices {} but the master has {}: every node needs the same devices", who, j.devices,
                       options_.devices);
  return {};
}

// Forms the cluster: the master waits for every listed node; the others wait
// for the master's verdict. Every failure names the node and the cause, on
// every node that can still be told, within the deadline.
// A process that held a rank before the cluster formed (an agent refused at
// the handshake, one that exited and was started again) left its data
// connection lost; every rank now is the one that joined.
void Agent::forget_stale_losses() {
  for (int r = 0; r < world_; ++r)
    if (r != options_.rank && transport_->peer_lost(r)) transport_->revive(r);
}

bool Agent::receive_server(std::string* identity, std::string* bytes) {
  std::vector<zmq::message_t> frames;
  (void)zmq::recv_multipart(server_, std::back_inserter(frames));
  if (frames.size() != 2) return false;
  *identity = frames[0].to_string();
  if (options_.key) {
    // The routing id a peer chose must be what its key says it is: node-R
    // for the agent of rank R (which sets it so), anything else for clients.
    const std::string_view user = comm::authenticated_identity(frames[1]);
    const bool claims_node = identity->rfind("node-", 0) == 0;
    if (claims_node ? *identity != user : user != comm::kClientIdentity) {
      spdlog::warn("{}: refused a control message from '{}' authenticated as '{}'",
                   node_name(options_.machines, options_.rank), *identity, user);
      return false;
    }
  }
  *bytes = frames[1].to_string();
  return true;
}

Status Agent::join() {
  auto deadline = after(options_.join_timeout_s);
  const std::string me = node_name(options_.machines, options_.rank);
  if (!is_master()) {
    const Machine& self = options_.machines[options_.rank];
    std::string version = options_.version.empty() ? ctl::kRillVersion : options_.version;
    post(Outgoing{true, "", ctl::encode(ctl::Join{options_.rank, version, ctl::schema_hash(),
                                                  format_machine(self), options_.devices})});
    while (Clock::now() < deadline) {
      flush();  // the Join, or what a full queue held back
      zmq::pollitem_t items[] = {{master_.handle(), 0, ZMQ_POLLIN, 0}, {server_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::chrono::milliseconds(50));
      if (const std::string failure = master_watch_->poll(); !failure.empty())
        return Status(Code::kPermissionDenied, fmt::format("{}: cannot join: {}", me, failure));
      if (server_watch_) (void)server_watch_->poll();
      std::string identity, bytes;
      if ((items[1].revents & ZMQ_POLLIN) && receive_server(&identity, &bytes))  // a status query while joining
        send_router(identity,
                    ctl::encode(ctl::StatusReply{nlohmann::json{{"state", "joining"}, {"rank", options_.rank}}.dump()}));
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      zmq::message_t reply;
      (void)master_.recv(reply);
      auto message = ctl::decode(reply.to_string_view());
      if (!message.ok()) return message.status().with_context(me + ": from the master");
      if (auto* r = std::get_if<ctl::JoinReply>(&*message)) {
        if (!r->ok) return Status(Code::kAborted, fmt::format("{}: the cluster did not form: {}", me, r->error));
        master_seen_ = Clock::now();
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
  // The master.
  int joined = 1;
  std::vector<ctl::Join> joins(world_);
  std::string failure;
  while (joined < world_ && failure.empty() && Clock::now() < deadline) {
    zmq::pollitem_t items[] = {{server_.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, std::chrono::milliseconds(50));
    if (server_watch_) (void)server_watch_->poll();
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    std::string identity, bytes;
    if (!receive_server(&identity, &bytes)) continue;
    auto message = ctl::decode(bytes);
    if (!message.ok()) {
      spdlog::warn("{}: ignoring a corrupt control message: {}", me, message.status().message());
      continue;
    }
    if (std::holds_alternative<ctl::StatusRequest>(*message)) {
      send_router(identity, ctl::encode(ctl::StatusReply{status_json()}));
      continue;
    }
    auto* j = std::get_if<ctl::Join>(&*message);
    if (!j) {  // a client that came early: served once the cluster is formed
      early_.emplace_back(identity, std::move(bytes));
      continue;
    }
    std::string error = join_error(*j, identity);
    if (error.empty() && !identity_of_node_[j->rank].empty())
      error = fmt::format("{} joined twice (two agents started with rank {}?)", node_name(options_.machines, j->rank),
                          j->rank);
    if (!error.empty()) {
      send_router(identity, ctl::encode(ctl::JoinReply{false, error, world_}));
      failure = error;
      break;
    }
    identity_of_node_[j->rank] = identity;
    last_seen_[j->rank] = Clock::now();
    joins[j->rank] = *j;
    ++joined;
  }
  if (failure.empty() && joined < world_) {
    std::string missing;
    for (int r = 1; r < world_; ++r)
      if (identity_of_node_[r].empty()) missing += (missing.empty() ? "" : ", ") + node_name(options_.machines, r);
    failure = fmt::format("{} did not join within {} s (not started, unreachable, or its port is taken)", missing,
                          options_.join_timeout_s);
  }
  if (!failure.empty()) {
    for (int r = 1; r < world_; ++r)
      if (!identity_of_node_[r].empty())
        send_router(identity_of_node_[r], ctl::encode(ctl::JoinReply{false, failure, world_}));
    return Status(Code::kAborted, fmt::format("{}: the cluster did not form: {}", me, failure));
  }
  forget_stale_losses();
  for (int r = 1; r < world_; ++r) send_router(identity_of_node_[r], ctl::encode(ctl::JoinReply{true, "", world_}));
  spdlog::info("{}: cluster of {} node(s) formed", me, world_);
  return {};
}

void Agent::check_liveness() {
  if (seconds_since(last_heartbeat_) >= options_.heartbeat_s) {
    last_heartbeat_ = Clock::now();
    if (is_master()) {
      for (int r = 1; r < world_; ++r)
        if (!lost_[r]) post_to_node(r, ctl::Heartbeat{0});
      track_pace();
    } else {
      ctl::Heartbeat beat{options_.rank};
      {
        MutexLock lock(run_mu_);
        if (running_) {
          const NodePace pace = running_->pace();
          beat = ctl::Heartbeat{options_.rank, running_job_, running_phase_, pace.steps, pace.busy_seconds};
          for (const NodePace::Thread& t : pace.threads) beat.threads.push_back({t.name, t.acts, t.busy_seconds, t.queued});
          beat.received_bytes_from = transport_->received_bytes_from();
        }
      }
      post_to_node(0, beat);
    }
  }
  if (is_master()) {
    for (int r = 1; r < world_; ++r) {
      if (lost_[r]) continue;
      // A dead process closes its connections: the data plane sees it within
      // its grace (a fraction of a second). A silent machine misses heartbeats.
      std::string reason;
      if (transport_->peer_lost(r))
        reason = fmt::format("{} lost: its connection closed", node_name(options_.machines, r));
      else if (seconds_since(last_seen_[r]) >= options_.dead_after_s)
        reason = fmt::format("{} lost: no heartbeat for {:g} s", node_name(options_.machines, r),
                             options_.dead_after_s);
      else
        continue;
      declare_lost(r, reason);
    }
  } else if (transport_->peer_lost(0) || seconds_since(master_seen_) >= options_.dead_after_s) {
    std::string why = transport_->peer_lost(0) ? std::string("its connection closed")
                                               : fmt::format("no heartbeat for {:g} s", options_.dead_after_s);
    fatal_ = Status(Code::kUnavailable, fmt::format("{}: the master {} is lost: {}",
                                                    node_name(options_.machines, options_.rank),
                                                    node_name(options_.machines, 0), why));
    MutexLock lock(run_mu_);
    if (running_) running_->abort(fatal_);
    shutdown_ = true;
  }
}

void Agent::declare_lost(int rank, const std::string& reason) {
  spdlog::error("{}", reason);
  // What waited for its full queue was for the process that is gone.
  std::erase_if(backlog_, [&](const Outgoing& o) { return !o.to_master && o.identity == identity_of_node_[rank]; });
  MutexLock lock(phase_mu_);  // the job thread reads lost_ under it
  lost_[rank] = true;
  phase_.lost = reason;
  if (local_runtime_) local_runtime_->abort(Status(Code::kUnavailable, reason));
  phase_cv_.notify_all();
}

// A control message was corrupted on a link (checksum): what it carried is
// lost, so the running phase stops, with the link as its cause. No node is
// lost; a job with restarts runs again.
void Agent::link_failed(const std::string& reason) {
  spdlog::error("{}", reason);
  MutexLock lock(phase_mu_);
  if (!job_running_) return;
  if (phase_.lost.empty()) phase_.lost = reason;
  if (local_runtime_) local_runtime_->abort(Status(Code::kUnavailable, reason));
  phase_cv_.notify_all();
}

// A restarted agent's Join. Its predecessor is gone: the control socket takes
// a second connection with a node's identity only once the first has closed,
// and an agent joins once, when it starts. So a node still thought up is
// lost now (its data connection may have come back to the new process
// before its loss was seen), and the new process takes its place.
void Agent::rejoin(const std::string& identity, int rank) {
  const std::string name = node_name(options_.machines, rank);
  if (!lost_[rank]) declare_lost(rank, fmt::format("{} lost: its agent was restarted", name));
  identity_of_node_[rank] = identity;
  last_seen_[rank] = Clock::now();
  unreachable_warned_[rank] = false;
  told_to_go_[rank] = false;
  transport_->revive(rank);  // before anything is sent to the new process
  {
    MutexLock lock(phase_mu_);  // the job thread waits for this
    lost_[rank] = false;
    phase_cv_.notify_all();
  }
  send_router(identity, ctl::encode(ctl::JoinReply{true, "", world_}));
  // The others forget its lost connection before any later plan reaches them
  // (one ordered channel to each).
  for (int r = 1; r < world_; ++r)
    if (r != rank && !lost_[r]) post_to_node(r, ctl::Rejoined{rank});
  spdlog::info("{} joined again", name);
}

Status Agent::serve() {
  for (auto& [identity, bytes] : early_) on_server_message(identity, bytes);
  early_.clear();
  while (!shutdown_) {
    zmq::pollitem_t items[] = {{server_.handle(), 0, ZMQ_POLLIN, 0}, {master_.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, is_master() ? 1 : 2, std::chrono::milliseconds(10));
    if (items[0].revents & ZMQ_POLLIN) {
      std::string identity, bytes;
      if (receive_server(&identity, &bytes)) on_server_message(identity, bytes);
    }
    if (server_watch_) (void)server_watch_->poll();
    if (!is_master() && (items[1].revents & ZMQ_POLLIN)) {
      zmq::message_t message;
      (void)master_.recv(message);
      on_master_message(message.to_string());
    }
    check_liveness();
    if (is_master()) {
      start_next_job();
      publish_metrics();
    }
    flush();
  }
  flush();
  if (job_thread_.joinable()) job_thread_.join();
  builder_.reset();  // what is queued runs (a stopped run ends at once)
  runner_.reset();
  return fatal_;
}

void Agent::on_server_message(const std::string& identity, const std::string& bytes) {
  auto message = ctl::decode(bytes);
  if (!message.ok()) {
    int node = -1;
    for (int r = 1; r < world_ && is_master(); ++r)
      if (identity_of_node_[r] == identity) node = r;
    if (node > 0)
      link_failed(fmt::format("the control link from {} to the master: {}", node_name(options_.machines, node),
                              message.status().message()));
    else
      spdlog::warn("{}: ignoring a corrupt control message from '{}': {}", node_name(options_.machines, options_.rank),
                   identity, message.status().message());
    return;
  }
  if (std::holds_alternative<ctl::StatusRequest>(*message)) {
    std::string reply = is_master() ? status_json()
                                    : nlohmann::json{{"state", "up"}, {"rank", options_.rank},
                                                     {"master", format_machine(options_.machines[0])}}.dump();
    send_router(identity, ctl::encode(ctl::StatusReply{reply}));
    return;
  }
  if (is_master()) master_handle(identity, std::move(*message));
}

void Agent::on_master_message(const std::string& bytes) {
  master_seen_ = Clock::now();
  auto message = ctl::decode(bytes);
  if (!message.ok()) {
    // What it said is lost: the master stops the running job, naming the link.
    std::string reason = fmt::format("the control link from the master to {}: {}",
                                     node_name(options_.machines, options_.rank), message.status().message());
    spdlog::error("{}", reason);
    post_to_node(0, ctl::LinkError{options_.rank, reason});
    return;
  }
  worker_handle(std::move(*message));
}

// The master's handling of agents and clients (loop thread).
void Agent::master_handle(const std::string& identity, ctl::Message message) {
  int node = -1;
  for (int r = 1; r < world_; ++r)
    if (identity_of_node_[r] == identity) node = r;
  if (auto* j = std::get_if<ctl::Join>(&message)) {  // a restarted agent
    std::string error = join_error(*j, identity);
    if (!error.empty()) {
      spdlog::warn("refused a node: {}", error);
      send_router(identity, ctl::encode(ctl::JoinReply{false, error, world_}));
      return;
    }
    rejoin(identity, j->rank);
    return;
  }
  if (node > 0 && lost_[node]) {
    // Declared lost (a silent machine that speaks again): it must not take
    // part in anything; its agent exits, and may be restarted to join again.
    if (!told_to_go_[node])
      send_router(identity, ctl::encode(ctl::Shutdown{fmt::format(
                                "{} was declared lost by the master; restart its agent to join again",
                                node_name(options_.machines, node))}));
    told_to_go_[node] = true;
    return;
  }
  if (node > 0) last_seen_[node] = Clock::now();
  std::visit(
      [&](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, ctl::Submit>) {
          auto job = graph::parse_job_json(m.job_text, m.file_name.empty() ? "submitted job" : m.file_name, m.overrides);
          Status allowed = job.ok() ? check_job_paths(*job, m.resume, roots_, node_name(options_.machines, 0))
                                    : job.status();
          if (!allowed.ok()) {
            send_router(identity, ctl::encode(ctl::SubmitReply{0, allowed.message(), 0}));
            return;
          }
          if (queue_.size() >= kMaxQueuedJobs || queued_bytes_ + m.job_text.size() > options_.max_message_bytes) {
            send_router(identity,
                        ctl::encode(ctl::SubmitReply{
                            0,
                            fmt::format("the master's queue is full: {} job(s) of {} bytes wait already (it holds at "
                                        "most {} jobs and --max-message-bytes {} bytes of job files); submit again "
                                        "when one has run",
                                        queue_.size(), queued_bytes_, kMaxQueuedJobs, options_.max_message_bytes),
                            0}));
            return;
          }
          queued_bytes_ += m.job_text.size();
          QueuedJob q{next_job_id_++, identity, std::move(m), std::move(*job)};
          int ahead = static_cast<int>(queue_.size()) + (job_running_ ? 1 : 0);
          send_router(identity, ctl::encode(ctl::SubmitReply{q.id, "", ahead}));
          queue_.push_back(std::move(q));
        } else if constexpr (std::is_same_v<T, ctl::PlanAck>) {
          MutexLock lock(phase_mu_);
          if (m.job_id == phase_.job_id && m.phase == phase_.phase) phase_.acks[m.node] = std::move(m);
          phase_cv_.notify_all();
        } else if constexpr (std::is_same_v<T, ctl::Done>) {
          MutexLock lock(phase_mu_);
          if (m.job_id == phase_.job_id && m.phase == phase_.phase) {
            if (!m.error.empty() && local_runtime_)
              local_runtime_->abort(ctl::node_error(m.code, node_name(options_.machines, m.node), m.error));
            phase_.dones[m.node] = std::move(m);
          }
          phase_cv_.notify_all();
        } else if constexpr (std::is_same_v<T, ctl::Snapshot>) {
          std::function<void(int64_t, VariablePiece)> collect;
          {
            MutexLock lock(phase_mu_);
            if (m.job_id == phase_.job_id) collect = phase_.on_snapshot;
          }
          // Pieces follow each other: a variable, then its state tensors.
          for (size_t begin = 0; collect && begin < m.tensors.size();) {
            size_t end = begin + 1;
            while (end < m.tensors.size() && m.tensors[end].name.rfind(m.tensors[begin].name + "/", 0) == 0) ++end;
            collect(m.steps_done, to_piece(m.tensors, begin, end));
            begin = end;
          }
        } else if constexpr (std::is_same_v<T, ctl::Shutdown>) {
          for (int r = 1; r < world_; ++r)
            if (!identity_of_node_[r].empty()) send_router(identity_of_node_[r], ctl::encode(ctl::Shutdown{}));
          send_router(identity, ctl::encode(ctl::StatusReply{R"({"state": "shutting down"})"}));
          shutdown_ = true;
          // The job running here ends now, and no later phase starts.
          MutexLock lock(phase_mu_);
          stopping_ = true;
          if (local_runtime_) local_runtime_->abort(Status(Code::kAborted, "the cluster is shutting down"));
          phase_cv_.notify_all();
        }
        if constexpr (std::is_same_v<T, ctl::Stop>) {
          // From a client: rill stop, or Ctrl-C on rill run --nodes and rill
          // launch. The client is told what was done (a following client
          // reads past the answer).
          if (!job_running_ && m.job_id == 0) {
            send_router(identity,
                        ctl::encode(ctl::StatusReply{nlohmann::json{{"stopping", "no job is running: nothing to stop"}}.dump()}));
            return;
          }
          if (!job_running_ || (m.job_id != 0 && m.job_id != running_id_)) {
            const std::string error = fmt::format("job {} is not running{}", m.job_id,
                                                  job_running_ ? fmt::format(" (job {} is)", running_id_) : "");
            send_router(identity, ctl::encode(ctl::StatusReply{nlohmann::json{{"error", error}}.dump()}));
            return;
          }
          const std::string how = m.now ? "at once" : "at the next step boundary, with its last checkpoint there";
          spdlog::warn("job {}: a client asks it to stop {}", running_id_, how);
          send_router(identity, ctl::encode(ctl::StatusReply{
                                    nlohmann::json{{"stopping", fmt::format("job {} ('{}') stops {}", running_id_,
                                                                            running_name_, how)}}
                                        .dump()}));
          stop_job_ = true;
          MutexLock lock(phase_mu_);
          if (m.now && local_runtime_)
            local_runtime_->abort(Status(Code::kAborted, "interrupted again: stopped at once"));
          else if (!m.now)
            begin_stop_locked();
        } else if constexpr (std::is_same_v<T, ctl::Held>) {
          MutexLock lock(phase_mu_);
          if (!phase_.held.empty() && m.job_id == phase_.job_id && m.phase == phase_.phase && node == m.node) {
            phase_.held[m.node] = m.last_begun;
            end_when_held_locked();
          }
        }
        if constexpr (std::is_same_v<T, ctl::LinkError>) link_failed(m.reason);
        if constexpr (std::is_same_v<T, ctl::Heartbeat>) {
          if (node > 0 && m.job_id >= 0 && job_running_ && m.job_id == running_id_) {
            pace_.add(node, pace_key(m.job_id, m.phase), steady_seconds(), m.steps, m.busy_seconds);
            activity_[node] = {std::move(m.threads), std::move(m.received_bytes_from)};
          }
        }
        // Anything else is not for the master.
      },
      message);
}

}  // namespace rill::agent_internal

namespace rill {

Status run_agent(const AgentOptions& options) {
  agent_internal::Agent agent(options);
  RILL_RETURN_IF_ERROR(agent.start());
  RILL_RETURN_IF_ERROR(agent.join());
  return agent.serve();
}

}  // namespace rill
