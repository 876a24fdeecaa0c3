// What the master shows of the cluster: `rill status`'s JSON, the HTTP
// endpoint and its board, and each node's pace.
#include "runtime/cluster/agent.h"
#include "runtime/cluster/master.h"

#include "runtime/cluster/comm_waits.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "comm/cluster_key.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/watch/http_server.h"
#include "runtime/node/node_runtime.h"

namespace rill::agent_internal {

std::string Master::status_json() {
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  const std::vector<PaceReport> pace = job_running_ ? pace_.report(clock_seconds()) : std::vector<PaceReport>(world_);
  const std::vector<LinkReport> links = job_running_ ? links_.report(clock_seconds()) : std::vector<LinkReport>(world_);
  nlohmann::ordered_json slow = nlohmann::ordered_json::array(), slow_links = nlohmann::ordered_json::array();
  for (int r = 0; r < world_; ++r) {
    std::string state = r == 0 ? "up (master)" : lost_[r] ? "lost" : identity_of_node_[r].empty() ? "not joined" : "up";
    nlohmann::ordered_json node = {{"rank", r},
                                   {"address", format_machine(options_.machines[r])},
                                   {"devices", options_.devices},
                                   {"state", state},
                                   {"seconds_since_heartbeat", r == 0 ? 0.0 : seconds_since(last_seen_[r])}};
    // An agent that took the node's place at another address.
    if (const comm::Endpoint& at = data_endpoints_[r];
        !(at == comm::Endpoint{options_.machines[r].address, options_.machines[r].ctrl_port + 1}))
      node["listening_at"] = format_machine(Machine{at.address, at.port - 1});
    // The running job's pace over the last 10 s (runtime/watch/pace.h).
    if (pace[r].known) {
      node["steps_per_second"] = pace[r].steps_per_second;
      node["busy_ms_per_step"] = pace[r].busy_ms_per_step;
      node["slow"] = pace[r].slow;
      if (pace[r].slow) slow.push_back(r);
    }
    // Its fastest data link over the last 10 s (runtime/watch/link_pace.h).
    if (links[r].known) {
      node["link_mb_per_s"] = links[r].best_mb_per_s;
      node["slow_link"] = links[r].slow;
      if (links[r].slow) slow_links.push_back(r);
    }
    // The checkpoint file it is writing (training may be waiting for it).
    int64_t writing = r == 0 ? disk_.step() : -1;
    if (r > 0 && !lost_[r]) {
      MutexLock lock(disk_mu_);
      writing = disk_heard_[r].step;
    }
    if (writing >= 0) node["writing_checkpoint_step"] = writing;
    nodes.push_back(std::move(node));
  }
  nlohmann::ordered_json queued = nlohmann::ordered_json::array();
  for (const QueuedJob& q : queue_) queued.push_back({{"job_id", q.id}, {"name", q.job.name}});
  nlohmann::ordered_json j;
  j["nodes"] = nodes;
  nlohmann::ordered_json running(nullptr);
  if (job_running_) {
    MutexLock lock(finished_mu_);
    running = {{"job_id", running_id_}, {"name", running_name_}, {"nodes", running_members_}};
    // Each node's flight record (comm/flight_record.h), by machine-list
    // rank; the nodes it names are the plan's (running.nodes maps them).
    nlohmann::ordered_json comm = nlohmann::ordered_json::object();
    for (int r = 0; r < world_ && r < static_cast<int>(activity_.size()); ++r)
      if (!activity_[r].comm.empty())
        if (nlohmann::json record = read_record(activity_[r].comm); record.is_object())
          comm[std::to_string(r)] = nlohmann::ordered_json::parse(record.dump());
    running["comm"] = std::move(comm);
  }
  j["running"] = running;
  j["queued"] = queued;
  nlohmann::ordered_json finished = nlohmann::ordered_json::array();
  {
    MutexLock lock(finished_mu_);
    for (const FinishedJob& f : finished_)
      finished.push_back({{"job_id", f.id}, {"name", f.name}, {"ok", f.ok}, {"line", f.line}});
  }
  j["finished"] = finished;
  j["slow_nodes"] = slow;
  j["slow_links"] = slow_links;
  // Where the dashboard, /metrics and /api are served (null: nowhere).
  j["http"] = http_address_.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(http_address_);
  return j.dump();
}

Status Master::start_http() {
  if (options_.http == "off") return {};
  const std::string spec = options_.http.empty() ? kDefaultHttp : options_.http;
  const size_t colon = spec.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0) {
    try {
      port = std::stoi(spec.substr(colon + 1));
    } catch (const std::exception&) {
    }
  }
  if (port < 0 || port > 65535)
    return invalid_argument("--http '{}': expected ADDRESS:PORT (or off)", spec);
  const std::string address = spec.substr(0, colon);
  if (!options_.key && !options_.insecure && !is_loopback_address(address))
    return invalid_argument("{}: --http {}: will not serve the cluster's jobs beyond this machine without a cluster "
                            "key (with one, the endpoint asks for its token); give --key FILE, or --insecure on a "
                            "trusted network",
                            node_name(options_.machines, 0), spec);
  const std::string token = options_.key ? comm::http_token(*options_.key) : "";
  auto server = HttpServer::start(address, port, board_, token);
  if (!server.ok()) {
    if (!options_.http.empty()) return server.status().with_context(node_name(options_.machines, 0));
    spdlog::warn("{}: metrics are not served ({}); --http ADDRESS:PORT picks another place",
                 node_name(options_.machines, 0), server.status().message());
    return {};
  }
  http_ = std::move(*server);
  http_address_ = fmt::format("{}:{}", address, http_->port());
  if (token.empty())
    spdlog::info("{}: dashboard at http://{}:{}/, metrics at /metrics, status at /api/status",
                 node_name(options_.machines, 0), address, http_->port());
  else
    spdlog::info("{}: dashboard at http://{}:{}/, metrics at /metrics, status at /api/status, for holders of the "
                 "token (`rill token --key {} --http {}:{}` prints the address with it)",
                 node_name(options_.machines, 0), address, http_->port(),
                 std::getenv(comm::kKeyFileEnv) ? std::getenv(comm::kKeyFileEnv) : "FILE", address, http_->port());
  return {};
}

void Master::publish_metrics() {
  if (seconds_since(last_published_) < 0.25) return;
  last_published_ = now();
  const std::vector<PaceReport> pace = job_running_ ? pace_.report(clock_seconds()) : std::vector<PaceReport>(world_);
  const std::vector<LinkReport> links = job_running_ ? links_.report(clock_seconds()) : std::vector<LinkReport>(world_);
  std::vector<MetricsBoard::Node> nodes;
  for (int r = 0; r < world_; ++r) {
    MetricsBoard::Node n;
    n.rank = r;
    n.address = format_machine(options_.machines[r]);
    n.state = r == 0 ? "up (master)" : lost_[r] ? "lost" : identity_of_node_[r].empty() ? "not joined" : "up";
    n.seconds_since_heartbeat = r == 0 ? 0.0 : seconds_since(last_seen_[r]);
    n.paced = pace[r].known;
    n.steps_per_second = pace[r].steps_per_second;
    n.device_ms_per_step = pace[r].busy_ms_per_step;
    n.slow = pace[r].slow;
    n.link_known = links[r].known;
    n.link_mb_per_s = links[r].best_mb_per_s;
    n.slow_link = links[r].slow;
    for (const ctl::Heartbeat::Thread& t : activity_[r].threads) n.threads.push_back({t.name, t.acts, t.busy_seconds, t.queued});
    n.received_bytes_from = activity_[r].received_bytes_from;
    nodes.push_back(std::move(n));
  }
  board_.publish_cluster(std::move(nodes), status_json());
}

// The master's own node's pace (the others' come with their heartbeats), and
// a warning, once per job, naming a node that has become slow.
void Master::track_pace() {
  if (!job_running_) {
    pace_.clear();
    links_.clear();
    activity_.assign(world_, {});
    return;
  }
  if (warned_job_ != running_id_) {  // jobs may follow each other between two calls
    warned_job_ = running_id_;
    slow_warned_.assign(world_, false);
    slow_link_warned_.assign(world_, false);
  }
  {
    MutexLock lock(phase_mu_);
    if (local_runtime_ && phase_.job_id == running_id_) {
      const NodePace pace = local_runtime_->pace();
      pace_.add(0, pace_key(running_id_, phase_.phase), clock_seconds(), pace.steps, pace.busy_seconds);
      Activity& own = activity_[0];
      own.threads.clear();
      for (const NodePace::Thread& t : pace.threads) own.threads.push_back({t.name, t.acts, t.busy_seconds, t.queued});
      own.received_bytes_from = transport_->received_bytes_from();
      own.comm = pace.comm;
      own_links_.add(clock_seconds(), transport_->link_counters());
      links_.add(0, clock_seconds(), own_links_.rates());
    }
  }
  const std::vector<PaceReport> report = pace_.report(clock_seconds());
  for (int r = 0; r < world_; ++r)
    if (report[r].slow && !slow_warned_[r]) {
      slow_warned_[r] = true;
      spdlog::warn("{} is slow: {:.1f} ms of device time per step, {:.1f}x the other nodes' median",
                   node_name(options_.machines, r), report[r].busy_ms_per_step, report[r].ratio);
    }
  const std::vector<LinkReport> links = links_.report(clock_seconds());
  for (int r = 0; r < world_; ++r)
    if (links[r].slow && !slow_link_warned_[r]) {
      slow_link_warned_[r] = true;
      spdlog::warn("{} is behind a slow link: its fastest data connection carries {:.1f} MB/s, {:.1f}x below the "
                   "other nodes' median",
                   node_name(options_.machines, r), links[r].best_mb_per_s, links[r].ratio);
    }
  MutexLock lock(phase_mu_);
  size_buckets_locked(report, links);
}

void Master::size_buckets_locked(const std::vector<PaceReport>& pace, const std::vector<LinkReport>& links) {
  // Once, in a training phase that keeps its steps (so the run can go on
  // from memory), while it is not ending anyway, once every member is
  // measured: its device time per step in this phase, its links' rate
  // (over the last 10 s: what an earlier job carried over them counts too).
  if (!buckets_.armed || buckets_.choice || !phase_.keeping || phase_.job_id != running_id_ || phase_.end >= 0 ||
      !phase_.held.empty() || stop_job_ || regroup_ || local_runtime_ == nullptr)  // not after the phase's run
    return;
  // Node 0 has kept a step of this phase (so whole() speaks of this run).
  const auto kept = kept_.steps();
  if (!kept || kept->second <= phase_.first_step) return;
  BucketSizing sizing = buckets_.sizing;
  sizing.nodes = static_cast<int>(phase_.members.size());
  sizing.link_mb_per_s = 0;
  for (int r : phase_.members) {
    if (!pace[r].known || !links[r].known) return;
    sizing.link_mb_per_s = sizing.link_mb_per_s == 0 ? links[r].best_mb_per_s
                                                     : std::min(sizing.link_mb_per_s, links[r].best_mb_per_s);
    sizing.device_ms_per_step = std::max(sizing.device_ms_per_step, pace[r].busy_ms_per_step);
  }
  BucketChoice choice = choose_bucket_bytes(sizing);
  // Going on from memory takes a whole model on every node (data
  // parallelism); node 0's tells for the layout.
  if (choice.resize && !kept_.whole()) {
    choice.resize = false;
    choice.bytes = sizing.current_bytes;
    choice.reason = "node 0 does not hold the whole model, so the run cannot go on from memory with another plan";
  }
  const std::string size = format_bucket_bytes(choice.bytes);
  const std::string line = fmt::format("buckets sized by the link: {} ({}; links {:.1f} MB/s, {:.1f} MB of gradients "
                                       "a step)",
                                       choice.resize ? size + " from the next step" : "kept at " + size, choice.reason,
                                       sizing.link_mb_per_s, static_cast<double>(sizing.gradient_bytes) / 1e6);
  spdlog::info("job {}: {}", phase_.job_id, line);
  buckets_.choice = choice;
  {
    MutexLock note(bucket_note_mu_);
    bucket_note_ = line;
  }
  bucket_note_ready_.store(true, std::memory_order_release);
  if (choice.resize) {
    regroup_ = true;
    begin_stop_locked();
  }
}

std::string Master::take_bucket_note() {
  // Asked every step: nothing to take costs one load.
  if (!bucket_note_ready_.exchange(false, std::memory_order_acq_rel)) return {};
  MutexLock lock(bucket_note_mu_);
  return std::exchange(bucket_note_, std::string());
}

}  // namespace rill::agent_internal
