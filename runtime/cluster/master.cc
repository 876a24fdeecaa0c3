// The master's agent: forming the cluster, the nodes' liveness, losing and
// taking back nodes (runtime/cluster/master.h).
#include "runtime/cluster/master.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "base/printable.h"
#include "comm/cluster_key.h"
#include "runtime/cluster/control_codec.h"

namespace rill::agent_internal {

Master::~Master() {
  if (job_thread_.joinable()) job_thread_.join();
}

Status Master::start_kind() {
  RILL_RETURN_IF_ERROR(start_http());
  identity_of_node_.assign(world_, "");
  last_seen_.assign(world_, now());
  last_heartbeat_ = now();
  lost_.assign(world_, false);
  incarnation_.assign(world_, 0);
  told_to_join_again_.assign(world_, false);
  pace_ = PaceTracker(world_);
  slow_warned_.assign(world_, false);
  links_ = LinkTracker(world_);
  slow_link_warned_.assign(world_, false);
  activity_.assign(world_, {});
  {
    MutexLock lock(disk_mu_);
    disk_heard_.assign(world_, {});
  }
  return {};
}

void Master::tick() {
  check_liveness();
  start_next_job();
  publish_metrics();
}

void Master::finish() {
  if (job_thread_.joinable()) job_thread_.join();
}

// Why the master refuses a joining node ("" = it may join).
std::string Master::join_error(const ctl::Join& j, const std::string& identity) const {
  std::string who = j.rank >= 0 && j.rank < world_ ? node_name(options_.machines, j.rank)
                                                   : fmt::format("a node claiming rank {}", j.rank);
  if (j.rank <= 0 || j.rank >= world_) return fmt::format("{} is outside the machine list ({} nodes)", who, world_);
  // Node R's agent connects with a routing id that names rank R; with a
  // key, the channel has checked that against the key too
  // (zmq_control_channel.cc).
  if (comm::routing_id_rank(identity) != j.rank)
    return fmt::format("a peer that is not node {} ('{}') asked to join as rank {}", j.rank, printable_name(identity),
                       j.rank);
  if (j.version != ctl::kRillVersion || j.schema_hash != ctl::schema_hash())
    return fmt::format("{} runs Rill {} (schema {:016x}) but the master runs Rill {} (schema {:016x}): run the "
                       "same version on every node",
                       who, j.version, j.schema_hash, ctl::kRillVersion, ctl::schema_hash());
  // Node counts must agree; the same nodes under other names (a host name
  // for an address) may, and are logged where the join is accepted.
  if (const std::string mine = machine_list(options_.machines);
      j.machines != mine && std::count(j.machines.begin(), j.machines.end(), ',') + 1 != world_)
    return fmt::format("{} was started with the machine list {} ({} nodes) but the master with {} ({}): start every "
                       "agent with the same --machines",
                       who, j.machines, std::count(j.machines.begin(), j.machines.end(), ',') + 1, mine, world_);
  if (j.devices != options_.devices)
    return fmt::format("{} has devices {} but the master has {}: every node needs the same devices", who, j.devices,
                       options_.devices);
  if (std::string error = session_error(j.data_session); !error.empty()) return fmt::format("{}: {}", who, error);
  return {};
}

// Where a joining node's agent listens (Join.address; empty: at its entry
// of the machine list): away from it (a standby taking its place), the
// data plane moves it there, and back when it is there again. An address
// that does not parse, is a name, is no one machine's, is loopback where
// the node is listed elsewhere, is another node's, or that the data plane
// refuses (another family) is the node's error.
std::string Master::take_address(int rank, const std::string& address) {
  const std::string name = node_name(options_.machines, rank);
  const Machine& listed = options_.machines[rank];
  comm::Endpoint endpoint{listed.address, listed.ctrl_port + 1};
  if (!address.empty()) {
    const std::string where = fmt::format("{} says it listens at {}", name, address);
    auto at = parse_machine(address, listed.ctrl_port, where);
    if (!at.ok()) return at.status().message();
    auto spelled = reachable_address(at->address, where);
    if (!spelled.ok()) return spelled.status().message();
    // The other nodes would dial themselves.
    if (is_loopback_address(*spelled) && !is_loopback_address(listed.address))
      return fmt::format("{}: a loopback address, where the machine list puts it on another machine", where);
    endpoint = {*spelled, at->ctrl_port + 1};
  }
  for (int r = 0; r < world_; ++r)
    if (r != rank && data_endpoints_[r] == endpoint)
      return fmt::format("{} says it listens at {}, where {} does", name, address, node_name(options_.machines, r));
  if (Status moved = move_peer(rank, endpoint); !moved.ok())
    return fmt::format("{} cannot be reached at {}: {}", name, address, moved.message());
  return {};
}

// Forms the cluster: waits for every listed node. Every failure names the
// node and the cause, on every node that can still be told, within the
// deadline (on the agent's clock).
Status Master::join() {
  const auto deadline = now() + seconds_of(options_.join_timeout_s);
  const std::string me = this->me();
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
      spdlog::warn("{}: ignoring a corrupt control message from '{}': {}", me, printable_name(identity),
                   message.status().message());
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
    // A Join that cannot be the node it names (a rank outside the list, a
    // peer that is not that rank's agent) is refused, and the cluster goes
    // on forming: no client, stranger or stray message stops it. What the
    // node itself says is wrong with it (another version, other devices)
    // ends the forming, named, on every node.
    if (!error.empty() && !(j->rank > 0 && j->rank < world_ && comm::routing_id_rank(identity) == j->rank)) {
      spdlog::warn("{}: refused a join: {}", me, error);
      send_router(identity, ctl::encode(ctl::JoinReply{false, error, world_}));
      continue;
    }
    if (error.empty() && !identity_of_node_[j->rank].empty())
      error = fmt::format("{} joined twice (two agents started with rank {}?)", node_name(options_.machines, j->rank),
                          j->rank);
    if (error.empty()) error = take_address(j->rank, j->address);
    if (!error.empty()) {
      send_router(identity, ctl::encode(ctl::JoinReply{false, error, world_}));
      failure = error;
      break;
    }
    if (j->machines != machine_list(options_.machines))
      spdlog::warn("{}: {} was started with the machine list {}, the master with {}", me,
                   node_name(options_.machines, j->rank), j->machines, machine_list(options_.machines));
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
  if (!own_session().empty()) {
    sessions_ = own_session();
    for (int r = 1; r < world_; ++r) sessions_ += joins[r].data_session;
    set_sessions(sessions_);
  }
  for (int r = 1; r < world_; ++r)
    send_router(identity_of_node_[r], ctl::encode(ctl::JoinReply{true, "", world_, sessions_, data_endpoints_}));
  spdlog::info("{}: cluster of {} node(s) formed", me, world_);
  // A client that came early is served now.
  for (auto& [identity, bytes] : early_) on_port_message(identity, bytes);
  early_.clear();
  return {};
}


void Master::check_liveness() {
  watch_links();
  if (seconds_since(last_heartbeat_) >= options_.heartbeat_s) {
    last_heartbeat_ = now();
    ctl::Heartbeat beat{0};
    beat.checkpoint_bytes =
        static_cast<int64_t>(static_cast<uint64_t>(disk_.bytes()) + cluster_disk_.load(std::memory_order_relaxed));
    for (int r = 1; r < world_; ++r)
      if (!lost_[r]) post_to_node(r, beat);
    track_pace();
  }
  for (int r = 1; r < world_; ++r) {
    if (lost_[r]) continue;
    // A dead process closes its connections: the data plane sees it within
    // its grace (a fraction of a second), while its heartbeats still came. A
    // silent machine or link misses heartbeats, and its data connection
    // times out after --link-timeout, which may come first.
    std::string reason;
    const double silent = seconds_since(last_seen_[r]);
    const bool closed = closed_while_heard(r, last_seen_[r]), timed_out = !closed && transport_->peer_lost(r);
    if (closed)
      reason = fmt::format("{} lost: its connection closed", node_name(options_.machines, r));
    else if (timed_out || silent >= options_.dead_after_s)
      reason = fmt::format("{} lost: no heartbeat for {:g} s reached the master {} (the node's machine, or the link "
                           "between them, is down)",
                           node_name(options_.machines, r), timed_out ? std::floor(silent * 10) / 10 : options_.dead_after_s,
                           node_name(options_.machines, 0));
    else
      continue;
    declare_lost(r, reason);
  }
}

void Master::declare_lost(int rank, const std::string& reason) {
  spdlog::error("{}", reason);
  // What waited for its full queue was for the process that is gone.
  std::erase_if(backlog_, [&](const Outgoing& o) { return !o.to_master && o.identity == identity_of_node_[rank]; });
  {
    MutexLock lock(disk_mu_);
    disk_heard_[static_cast<size_t>(rank)].step = -1;  // writes nothing now
  }
  MutexLock lock(phase_mu_);  // the job thread reads lost_ under it
  lost_[rank] = true;
  // A node the running phase does not run on (lost before, under live
  // membership) stops nothing.
  if (phase_.members.empty() || phase_.member(rank)) {
    phase_.lost = reason;
    phase_.lost_ranks.push_back(rank);
    if (local_runtime_) local_runtime_->abort(Status(Code::kUnavailable, reason));
  }
  phase_cv_.notify_all();
}

// A control message was corrupted on a link (checksum): what it carried is
// lost, so the running phase stops, with the link as its cause. No node is
// lost; a job with restarts runs again.
void Master::link_failed(const std::string& reason) {
  spdlog::error("{}", reason);
  MutexLock lock(phase_mu_);
  if (!job_running_) return;
  if (phase_.lost.empty()) phase_.lost = reason;
  if (local_runtime_) local_runtime_->abort(Status(Code::kUnavailable, reason));
  phase_cv_.notify_all();
}

// A restarted agent's Join, or one that lost the master to a silent link
// and joins again on a new control link (NodeAgent::join_again). Either
// way what the node ran is gone: an agent joins again only after it stopped
// its part. So a node still thought up is lost now (its data connection
// may have come back before its loss was seen), and the joining agent takes
// its place.
void Master::rejoin(const std::string& identity, int rank, const std::string& session) {
  const std::string name = node_name(options_.machines, rank);
  if (!lost_[rank])
    declare_lost(rank, fmt::format("{} lost: its agent joined again (restarted, or cut off from the master)", name));
  identity_of_node_[rank] = identity;
  last_seen_[rank] = now();
  unreachable_warned_[rank] = false;
  told_to_join_again_[rank] = false;
  // The new process's session: what it sends opens, what is sent to it is
  // sealed for it, before anything is sent to it.
  if (!sessions_.empty()) {
    sessions_.replace(session.size() * static_cast<size_t>(rank), session.size(), session);
    set_sessions(sessions_);  // only this rank's changed
  }
  transport_->revive(rank);
  {
    MutexLock lock(phase_mu_);  // the job thread waits for this
    lost_[rank] = false;
    ++incarnation_[rank];
    // A live job training without this node takes it back at the next step
    // boundary (the phase ends there, and the job goes on with it).
    if (job_running_ && phase_.keeping && !phase_.member(rank) && !stop_job_) {
      spdlog::info("job {}: {} is back; it joins the training at the next step boundary", phase_.job_id, name);
      regroup_ = true;
      begin_stop_locked();
    }
    phase_cv_.notify_all();
  }
  send_router(identity, ctl::encode(ctl::JoinReply{true, "", world_, sessions_, data_endpoints_}));
  // The others take its address and session and forget its lost connection
  // before any later plan reaches them (one ordered channel to each).
  for (int r = 1; r < world_; ++r)
    if (r != rank && !lost_[r]) post_to_node(r, ctl::Rejoined{rank, session, data_endpoints_[rank]});
  spdlog::info("{} joined again", name);
}

void Master::on_port_message(const std::string& identity, const std::string& bytes) {
  if (node_of(identity) > 0) control_bytes_from_nodes_ += static_cast<int64_t>(bytes.size());
  auto message = ctl::decode(bytes);
  if (!message.ok()) {
    const int node = node_of(identity);
    if (node > 0)
      link_failed(fmt::format("the control link from {} to the master: {}", node_name(options_.machines, node),
                              message.status().message()));
    else
      spdlog::warn("{}: ignoring a corrupt control message from '{}': {}", me(), printable_name(identity),
                   message.status().message());
    return;
  }
  master_handle(identity, std::move(*message));
}

// The master has no link up to a master.
void Master::on_master_message(const std::string&) {}

int Master::node_of(const std::string& identity) const {
  for (int r = 1; r < world_; ++r)
    if (identity_of_node_[r] == identity) return r;
  return -1;
}

std::string Master::identity_of(int node) const { return identity_of_node_[node]; }

void Master::post_to_node(int node, const ctl::Message& m) { post(Outgoing{false, "", ctl::encode(m), node}); }

}  // namespace rill::agent_internal
