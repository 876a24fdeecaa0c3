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

#include "comm/counting_transport.h"
#include "comm/transport.h"
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "kernels/cuda/cuda_context.h"
#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/faulty_control_channel.h"
#include "runtime/cluster/zmq_control_channel.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/node/node_runtime.h"
#include "runtime/node/plan_reader.h"

namespace rill::agent_internal {

namespace {

class SteadyClock final : public AgentClock {
 public:
  std::chrono::steady_clock::time_point now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      world_(static_cast<int>(options_.machines.size())),
      clock_(options_.clock ? options_.clock : std::make_shared<SteadyClock>()) {}

Agent::~Agent() {
  if (job_thread_.joinable()) job_thread_.join();
  builder_.reset();
  runner_.reset();
  if (transport_) transport_->close();
}

Status Agent::open_channel() {
  std::unique_ptr<ControlChannel> channel;
  if (options_.control_channel) {
    channel = options_.control_channel();
  } else {
    ZmqControlOptions zmq_options{options_.machines, options_.rank, options_.key, options_.max_message_bytes,
                                  options_.control_send_hwm};
    RILL_ASSIGN_OR_RETURN(channel, make_zmq_control_channel(zmq_options));
  }
  if (options_.fault.kind != ControlFault::Kind::kNone)
    channel = std::make_unique<FaultyControlChannel>(std::move(channel), options_.fault,
                                                     node_name(options_.machines, options_.rank));
  channel_ = std::move(channel);
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
  RILL_RETURN_IF_ERROR(open_channel());
  std::unique_ptr<comm::Transport> data;
  if (options_.data_transport) {
    data = options_.data_transport();
  } else {
    std::vector<comm::Endpoint> endpoints;
    for (const Machine& m : options_.machines) endpoints.push_back({m.address, m.ctrl_port + 1});
    comm::ZmqOptions transport_options;
    transport_options.key = options_.key;
    transport_options.max_message_bytes = options_.max_message_bytes;
    auto transport = comm::make_zmq_transport(options_.rank, endpoints, transport_options);
    if (!transport.ok())
      return transport.status().with_context(fmt::format("{}: data port", node_name(options_.machines, options_.rank)));
    data = std::move(*transport);
  }
  transport_ = std::make_unique<comm::CountingTransport>(std::move(data));
  transport_->accept_tags(0, 0);  // nothing until a run's plan opens its tags
  if (!is_master()) {
    builder_ = std::make_unique<SerialExecutor>();
    runner_ = std::make_unique<SerialExecutor>();
  }
  if (is_master()) RILL_RETURN_IF_ERROR(start_http());
  identity_of_node_.assign(world_, "");
  last_seen_.assign(world_, now());
  master_seen_ = now();
  last_heartbeat_ = now();
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

Status Agent::join() {
  const auto deadline = now() + seconds_of(options_.join_timeout_s);
  const std::string me = node_name(options_.machines, options_.rank);
  if (!is_master()) {
    const Machine& self = options_.machines[options_.rank];
    std::string version = options_.version.empty() ? ctl::kRillVersion : options_.version;
    post(Outgoing{true, "", ctl::encode(ctl::Join{options_.rank, version, ctl::schema_hash(),
                                                  format_machine(self), options_.devices})});
    while (now() < deadline) {
      flush();  // the Join, or what a full queue held back
      ControlChannel::Incoming in;
      const bool got = channel_->receive(std::chrono::milliseconds(50), &in);
      if (const std::string failure = channel_->master_failure(); !failure.empty())
        return Status(Code::kPermissionDenied, fmt::format("{}: cannot join: {}", me, failure));
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
  // The master.
  int joined = 1;
  std::vector<ctl::Join> joins(world_);
  std::string failure;
  while (joined < world_ && failure.empty() && now() < deadline) {
    ControlChannel::Incoming in;
    if (!channel_->receive(std::chrono::milliseconds(50), &in) || in.from_master) continue;
    const std::string& identity = in.identity;
    std::string& bytes = in.bytes;
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
    last_seen_[j->rank] = now();
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
    last_heartbeat_ = now();
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
  last_seen_[rank] = now();
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
    // What has come is handled before liveness is judged: a master that
    // said Shutdown and closed is not lost (a bounded batch, so a flood
    // cannot starve the heartbeats).
    ControlChannel::Incoming in;
    auto wait = std::chrono::milliseconds(10);
    for (int n = 0; n < kMessagesPerTurn && !shutdown_ && channel_->receive(wait, &in); ++n) {
      wait = std::chrono::milliseconds(0);
      if (in.from_master) on_master_message(in.bytes);
      else on_server_message(in.identity, in.bytes);
    }
    if (shutdown_) break;  // told to go: a master gone since is not lost
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
  if (is_master()) return master_handle(identity, std::move(*message));
  if (std::holds_alternative<ctl::StatusRequest>(*message)) {
    const std::string reply = nlohmann::json{{"state", "up"}, {"rank", options_.rank},
                                             {"master", format_machine(options_.machines[0])}}.dump();
    send_router(identity, ctl::encode(ctl::StatusReply{reply}));
  }
}

void Agent::on_master_message(const std::string& bytes) {
  master_seen_ = now();
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

}  // namespace rill::agent_internal

namespace rill {

Status run_agent(const AgentOptions& options) {
  agent_internal::Agent agent(options);
  RILL_RETURN_IF_ERROR(agent.start());
  RILL_RETURN_IF_ERROR(agent.join());
  return agent.serve();
}

}  // namespace rill
