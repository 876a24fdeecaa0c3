// `rill status`: a cluster's nodes (devices, state, heartbeat, pace, the
// slow ones), its running, queued and finished jobs; with --comm, the
// running job's flight records on every node.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/key_flags.h"
#include "runtime/cluster/client.h"
#include "runtime/watch/link_pace.h"
#include "runtime/watch/pace.h"

namespace rill::cli {
namespace {

// `rill status --comm`: each node's flight record of the running job
// (comm/flight_record.h), nodes named by the plan (running.nodes maps them).
int print_comm(const nlohmann::json& j, int64_t job) {
  if (j.is_discarded() || !j.contains("running")) return fail_command(invalid_argument("the master's status is not JSON"));
  const nlohmann::json& running = j["running"];
  if (running.is_null()) return fail_command(Status(Code::kNotFound, "no job is running"));
  if (job >= 0 && running["job_id"].get<int64_t>() != job)
    return fail_command(Status(Code::kNotFound, fmt::format("job {} is not running (job {} is)", job,
                                                            running["job_id"].get<int64_t>())));
  fmt::print("job {} ({}) on nodes {}: the plan's node i is rank nodes[i]\n", running["job_id"].get<int64_t>(),
             running["name"].get<std::string>(), running["nodes"].dump());
  if (!running.contains("comm") || running["comm"].empty()) fmt::print("no record yet (none before a node's first heartbeat)\n");
  else
    for (const auto& [rank, record] : running["comm"].items()) {
      fmt::print("rank {}:\n", rank);
      for (const auto& c : record.value("callers", nlohmann::json::array())) {
        std::string line = fmt::format("  {} among [{}]: {} calls, {}", c.value("name", ""),
                                       fmt::join(c.value("group", std::vector<int>{}), ", "), c.value("calls", 0),
                                       c.value("state", ""));
        if (c.contains("op"))
          line += fmt::format(" {} #{} for {:.0f} ms", c.value("op", ""), c.value("seq", int64_t{0}), c.value("ms", 0.0));
        if (c.contains("waiting_for")) line += fmt::format(", waiting for node {}", c["waiting_for"].get<int>());
        if (c.contains("last_completed"))
          line += fmt::format("; last completed {} #{}", c["last_completed"].value("op", ""),
                              c["last_completed"].value("seq", int64_t{0}));
        fmt::print("{}\n", line);
      }
      for (const auto& l : record.value("links", nlohmann::json::array()))
        fmt::print("  link with node {}: {} messages sent ({} bytes), {} received ({} bytes){}\n", l.value("node", -1),
                   l.value("sent", int64_t{0}), l.value("sent_bytes", int64_t{0}), l.value("received", int64_t{0}),
                   l.value("received_bytes", int64_t{0}),
                   l.contains("last_received_ms_ago")
                       ? fmt::format(", the last {:.0f} ms ago", l["last_received_ms_ago"].get<double>())
                       : "");
      for (const auto& e : record.value("events", nlohmann::json::array()))
        fmt::print("  {:>9.1f} ms ago  {:<8} {}\n", e.value("ms_ago", 0.0), e.value("event", ""),
                   e.contains("caller") ? fmt::format("{} #{}", e.value("caller", ""), e.value("seq", int64_t{0}))
                                        : fmt::format("node {} message {} ({} bytes)", e.value("node", -1),
                                                      e.value("message", int64_t{0}), e.value("bytes", int64_t{0})));
    }
  return 0;
}

int show_status(const std::string& master, bool comm, int64_t job) {
  auto client = Client::connect(master, 5.0, /*running=*/true, /*refused_grace_s=*/0);
  if (!client.ok()) return fail_command(client.status());
  auto status = (*client)->status();
  if (!status.ok()) return fail_command(status.status());
  auto j = nlohmann::json::parse(*status, nullptr, false);
  if (comm) {
    // The records are the nodes' word: a field of an unexpected type is
    // reported, never a crash.
    try {
      return print_comm(j, job);
    } catch (const nlohmann::json::exception& e) {
      return fail_command(data_loss("the master's status holds a record this rill cannot read ({}): {}", e.what(),
                                    status->substr(0, 200)));
    }
  }
  if (j.is_discarded() || !j.contains("nodes")) {
    fmt::print("{}\n", *status);
    return 0;
  }
  fmt::print("{:<6}{:<24}{:<10}{:<14}{:<14}{:<10}{}\n", "node", "address", "devices", "state", "heartbeat", "steps/s",
             "device ms/step");
  for (const auto& n : j["nodes"]) {
    std::string pace;
    if (n.contains("steps_per_second"))
      pace = fmt::format("{:<10.1f}{:.2f}{}", n["steps_per_second"].get<double>(), n["busy_ms_per_step"].get<double>(),
                         n["slow"].get<bool>() ? "  slow" : "");
    if (n.contains("link_mb_per_s"))
      pace += fmt::format("  link {:.1f} MB/s{}", n["link_mb_per_s"].get<double>(),
                          n["slow_link"].get<bool>() ? " (slow)" : "");
    if (n.contains("writing_checkpoint_step"))
      pace += fmt::format("  writing the checkpoint of step {}", n["writing_checkpoint_step"].get<int64_t>());
    if (n.contains("listening_at")) pace += fmt::format("  listening at {}", n["listening_at"].get<std::string>());
    fmt::print("{:<6}{:<24}{:<10}{:<14}{:<14}{}\n", n["rank"].get<int>(), n["address"].get<std::string>(),
               n["devices"].get<std::string>(), n["state"].get<std::string>(),
               fmt::format("{:.1f} s ago", n["seconds_since_heartbeat"].get<double>()), pace);
  }
  if (j.contains("slow_nodes") && !j["slow_nodes"].empty()) {
    std::vector<std::string> named;
    for (const auto& r : j["slow_nodes"]) named.push_back(std::to_string(r.get<int>()));
    fmt::print("slow: node {} (device time per step {}x the others' median or more)\n", fmt::join(named, ", node "),
               kSlowRatio);
  }
  if (j.contains("slow_links") && !j["slow_links"].empty()) {
    std::vector<std::string> named;
    for (const auto& r : j["slow_links"]) named.push_back(std::to_string(r.get<int>()));
    fmt::print("slow link: node {} (its fastest data link {}x slower than the others' median or more)\n",
               fmt::join(named, ", node "), kSlowLinkRatio);
  }
  if (j["running"].is_null()) fmt::print("running: none\n");
  else {
    const auto& running = j["running"];
    std::string on;  // the nodes it runs on, when not every node (a lost node left behind)
    if (running.contains("nodes") && running["nodes"].size() < j["nodes"].size())
      on = fmt::format(" on nodes {} of {}", running["nodes"].dump(), j["nodes"].size());
    fmt::print("running: job {} ({}){}\n", running["job_id"].get<int64_t>(), running["name"].get<std::string>(), on);
  }
  fmt::print("queued: {}\n", j["queued"].size());
  if (j.contains("finished"))
    for (const auto& f : j["finished"])
      fmt::print("finished: job {} ({}) {}: {}\n", f["job_id"].get<int64_t>(), f["name"].get<std::string>(),
                 f["ok"].get<bool>() ? "ok" : "failed", f["line"].get<std::string>());
  return 0;
}

class StatusCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("status", "Show a cluster: nodes, devices, state, jobs");
    app_->add_option("--master", master_, "The master's address[:port]")->required();
    app_->add_option("--job", job_, "With --comm: the running job's id (refused if another job runs)");
    app_->add_flag("--comm", comm_,
                   "The running job's flight records: on every node, each collective's call in flight and the node "
                   "it waits for, the last one completed, the actor messages on each link, the last events");
    key_.add_key(app_);
    key_.add_insecure(app_, "Connect without a key (to agents started with --insecure)");
  }
  int act() override {
    if (int code = key_.apply(/*client_key_does=*/true); code != 0) return code;
    return show_status(master_, comm_, job_);
  }

 private:
  std::string master_;
  int64_t job_ = -1;
  bool comm_ = false;
  KeyFlags key_;
};

}  // namespace

std::unique_ptr<Command> status_command() { return std::make_unique<StatusCommand>(); }

}  // namespace rill::cli
