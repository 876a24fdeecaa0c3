#include "runtime/cluster/agent.h"
#include "runtime/cluster/agent_impl.h"
#include "runtime/cluster/master.h"
#include "runtime/cluster/node_agent.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
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
#include "comm/default_key.h"
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

// Every connection to the agent's control, data and HTTP ports holds a file
// descriptor, and many distributions start processes with a soft limit of
// 1,024 under a hard one far above: the soft limit goes up to the hard one,
// so that only the ports' own bounds (comm/connection_guard.h,
// runtime/watch/http_server.h) decide what a flood of connections holds.
void raise_open_file_limit(const std::string& me) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  // Linux takes no "unlimited" here: its own ceiling (fs.nr_open) is 2^20 by default.
  const rlim_t target = limit.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : limit.rlim_max;
  if (limit.rlim_cur >= target) return;
  const rlim_t was = limit.rlim_cur;
  limit.rlim_cur = target;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("{}: cannot raise the open-file limit from {} to {}: {}", me, was, target, std::strerror(errno));
    return;
  }
  spdlog::info("{}: open-file limit raised from {} to {} (each connection to its ports holds one)", me, was, target);
}

}  // namespace

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      world_(static_cast<int>(options_.machines.size())),
      clock_(options_.clock ? options_.clock : std::make_shared<SteadyClock>()) {}

Agent::~Agent() {
  if (transport_) transport_->close();
}

Status Agent::open_channel() {
  std::unique_ptr<ControlChannel> channel;
  if (options_.control_channel) {
    channel = options_.control_channel();
  } else {
    std::vector<Machine> machines = options_.machines;
    machines[options_.rank] = options_.own_machine();  // where this agent listens
    ZmqControlOptions zmq_options{machines, options_.rank, options_.key, options_.max_message_bytes,
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
  const Machine& self = options_.own_machine();
  const bool beyond_loopback = !is_loopback_address(self.address);
  if (!options_.key && !options_.insecure && beyond_loopback) {
    auto default_path = comm::default_key_path();
    return invalid_argument(
        "{}: will not listen on {} without a cluster key: anyone who reaches it could run jobs here. Give the key "
        "file with --key FILE or {}, or put it at {} (`rill keygen FILE` writes one; every agent and client needs "
        "the same), or start with --insecure on a trusted network",
        node_name(options_.machines, options_.rank), format_machine(self), comm::kKeyFileEnv,
        default_path.ok() ? *default_path : std::string("~/.config/rill/cluster.key"));
  }
  if (options_.insecure && !options_.key && beyond_loopback)
    spdlog::warn("{}: --insecure: listening on {} without a key; anyone who reaches it can run jobs here",
                 node_name(options_.machines, options_.rank), format_machine(self));
  if (cluster.device_type == DeviceType::kCuda)
    RILL_RETURN_IF_ERROR(require_cuda_devices(cluster.devices_per_node, node_name(options_.machines, options_.rank)));
  raise_open_file_limit(node_name(options_.machines, options_.rank));
  RILL_RETURN_IF_ERROR(open_channel());
  std::unique_ptr<comm::Transport> data;
  if (options_.data_transport) {
    data = options_.data_transport();
  } else {
    std::vector<comm::Endpoint> endpoints = listed_data_endpoints(options_.machines);
    endpoints[options_.rank] = {self.address, self.ctrl_port + 1};
    comm::ZmqOptions transport_options;
    // Away from its entry, it shares memory with none: its peers send to it
    // over TCP (comm/transport.h, set_peer_endpoint).
    if (options_.away()) transport_options.listed_endpoint = listed_data_endpoints(options_.machines)[options_.rank];
    transport_options.key = options_.key;
    transport_options.max_message_bytes = options_.max_message_bytes;
    transport_options.log_shared_memory = true;
    transport_options.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(options_.link_timeout_s * 1e3));
    transport_options.heartbeat_interval =
        std::min(transport_options.heartbeat_interval, transport_options.heartbeat_timeout / 4);
    auto transport = comm::make_zmq_transport(options_.rank, endpoints, transport_options);
    if (!transport.ok())
      return transport.status().with_context(fmt::format("{}: data port", node_name(options_.machines, options_.rank)));
    data = std::move(*transport);
  }
  transport_ = std::make_unique<comm::CountingTransport>(std::move(data));
  data_endpoints_ = listed_data_endpoints(options_.machines);
  data_endpoints_[options_.rank] = {self.address, self.ctrl_port + 1};
  transport_->accept_tags(0, 0);  // nothing until a run's plan opens its tags
  unreachable_warned_.assign(world_, false);
  link_up_.assign(world_, now());
  return start_kind();
}

void Agent::forget_stale_losses() {
  for (int r = 0; r < world_; ++r)
    if (r != options_.rank && transport_->peer_lost(r)) transport_->revive(r);
}

std::string Agent::own_session() const {
  const comm::SessionId* id = transport_->session();
  return id ? std::string(reinterpret_cast<const char*>(id->data()), id->size()) : std::string();
}

void Agent::set_sessions(const std::string& all) {
  comm::SessionId id;
  if (all.size() != id.size() * static_cast<size_t>(world_)) return;
  for (int r = 0; r < world_; ++r) {
    if (r == options_.rank) continue;
    std::memcpy(id.data(), all.data() + id.size() * static_cast<size_t>(r), id.size());
    transport_->set_peer_session(r, id);
  }
}

std::vector<comm::Endpoint> Agent::listed_data_endpoints(const std::vector<Machine>& machines) {
  std::vector<comm::Endpoint> endpoints;
  for (const Machine& m : machines) endpoints.push_back({m.address, m.ctrl_port + 1});
  return endpoints;
}

Status Agent::move_peer(int rank, const comm::Endpoint& endpoint) {
  if (rank < 0 || rank >= world_ || rank == options_.rank || data_endpoints_[rank] == endpoint) return {};
  RILL_RETURN_IF_ERROR(transport_->set_peer_endpoint(rank, endpoint));
  data_endpoints_[rank] = endpoint;
  spdlog::info("{}: {} listens at {} now", node_name(options_.machines, options_.rank),
               node_name(options_.machines, rank), format_machine(Machine{endpoint.address, endpoint.port - 1}));
  return {};
}

std::string Agent::session_error(const std::string& session) const {
  const size_t expected = transport_->session() ? sizeof(comm::SessionId) : 0;
  if (session.size() == expected) return {};
  return fmt::format("its data-plane session id has {} bytes, not {}", session.size(), expected);
}

void Agent::handle_incoming(std::chrono::milliseconds wait) {
  ControlChannel::Incoming in;
  for (int n = 0; n < kMessagesPerTurn && !shutdown_ && channel_->receive(wait, &in); ++n) {
    wait = std::chrono::milliseconds(0);
    if (in.from_master) on_master_message(in.bytes);
    else on_port_message(in.identity, in.bytes);
  }
}

Status Agent::serve() {
  while (!shutdown_) {
    // What has come is handled before liveness is judged: a master that
    // said Shutdown and closed is not lost (a bounded batch, so a flood
    // cannot starve the heartbeats).
    handle_incoming(kIdleWait);
    if (shutdown_) break;  // told to go: a master gone since is not lost
    tick();
    flush();
  }
  flush();
  finish();
  return fatal_;
}

}  // namespace rill::agent_internal

namespace rill {

Status run_agent(const AgentOptions& options) {
  std::unique_ptr<agent_internal::Agent> agent;
  if (options.rank == 0) agent = std::make_unique<agent_internal::Master>(options);
  else agent = std::make_unique<agent_internal::NodeAgent>(options);
  RILL_RETURN_IF_ERROR(agent->start());
  RILL_RETURN_IF_ERROR(agent->join());
  return agent->serve();
}

}  // namespace rill
