#include "runtime/watch/metrics_board.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace rill {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A label value in the exposition format: backslash, quote and newline escaped.
std::string label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// A sample value: Prometheus spells the non-finite ones NaN, +Inf, -Inf.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// Writes one metric family: its HELP, TYPE and samples.
class Family {
 public:
  Family(std::string* out, const char* name, const char* type, const char* help) : out_(out), name_(name) {
    *out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const std::string& labels, double value) {
    *out_ += fmt::format("{}{}{} {}\n", name_, labels.empty() ? "" : "{", labels.empty() ? labels : labels + "}",
                         number(value));
  }

 private:
  std::string* out_;
  const char* name_;
};

}  // namespace

void MetricsBoard::publish_cluster(std::vector<Node> nodes, std::string status_json) {
  MutexLock lock(mu_);
  nodes_ = std::move(nodes);
  status_json_ = std::move(status_json);
}

std::vector<MetricsBoard::Node> MetricsBoard::nodes() const {
  MutexLock lock(mu_);
  return nodes_;
}

MetricsBoard::Job* MetricsBoard::find(int64_t job) {
  for (Job& j : jobs_)
    if (j.id == job) return &j;
  return nullptr;
}

void MetricsBoard::job_started(int64_t job, const std::string& name, const std::string& job_text, int64_t steps,
                               int64_t global_batch) {
  MutexLock lock(mu_);
  if (Job* j = find(job)) {  // a restarted attempt goes on in the same entry
    j->state = "running";
    j->steps = steps;
    j->global_batch = global_batch;
    return;
  }
  if (jobs_.size() == kKeptJobs) jobs_.erase(jobs_.begin());
  Job j;
  j.id = job;
  j.name = name;
  j.job_text = job_text;
  j.steps = steps;
  j.global_batch = global_batch;
  j.started = j.last_step_at = steady_seconds();
  jobs_.push_back(std::move(j));
}

void MetricsBoard::job_step(int64_t job, int64_t step, std::span<const std::string> names,
                            std::span<const double> values) {
  const double now = steady_seconds();
  MutexLock lock(mu_);
  Job* j = find(job);
  if (j == nullptr) return;
  j->step = step + 1;
  j->step_seconds = now - j->last_step_at;
  j->last_step_at = now;
  if (j->step_seconds > 0) {
    const double rate = static_cast<double>(j->global_batch) / j->step_seconds;
    j->samples_per_second = j->samples_per_second == 0 ? rate : 0.9 * j->samples_per_second + 0.1 * rate;
  }
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) j->metrics[names[i]] = values[i];
  if (j->curve_names.empty()) j->curve_names.assign(names.begin(), names.end());
  if (step % j->stride != 0) return;
  const size_t row = j->curve_names.size() + 1;
  j->curve.push_back(static_cast<double>(step + 1));
  for (const std::string& name : j->curve_names) {
    double value = std::numeric_limits<double>::quiet_NaN();
    for (size_t i = 0; i < names.size() && i < values.size(); ++i)
      if (names[i] == name) value = values[i];
    j->curve.push_back(value);
  }
  if (j->curve.size() / row >= kCurvePoints) {  // keep every other row, and half as many from now on
    size_t kept = 0;
    for (size_t r = 0; r < j->curve.size() / row; r += 2, ++kept)
      std::copy_n(j->curve.begin() + static_cast<std::ptrdiff_t>(r * row), row,
                  j->curve.begin() + static_cast<std::ptrdiff_t>(kept * row));
    j->curve.resize(kept * row);
    j->stride *= 2;
  }
}

void MetricsBoard::job_plan(int64_t job, std::string dot) {
  MutexLock lock(mu_);
  if (Job* j = find(job)) j->plan_dot = std::move(dot);
}

StatusOr<std::string> MetricsBoard::job_plan_svg(int64_t job) {
  std::string dot;
  {
    MutexLock lock(mu_);
    Job* j = find(job);
    if (j == nullptr) return Status(Code::kNotFound, fmt::format("no job {}", job));
    if (!j->plan_svg.empty()) return j->plan_svg;
    if (j->plan_dot.empty()) return Status(Code::kNotFound, fmt::format("job {}'s plan is not kept (too large to draw)", job));
    dot = j->plan_dot;
  }
  // Graphviz reads the DOT from a file of our own and writes SVG to a pipe.
  char path[] = "/tmp/rill-plan-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return Status(Code::kUnavailable, "cannot make a temporary file for the plan");
  const bool written = ::write(fd, dot.data(), dot.size()) == static_cast<ssize_t>(dot.size());
  ::close(fd);
  std::string svg;
  if (written)
    // Bounded: a drawing that takes over 30 s is not one (the plan kept is a
    // box per op or layer, drawn in well under a second).
    if (std::FILE* pipe = popen(fmt::format("timeout 30 dot -Tsvg {} 2>/dev/null", path).c_str(), "r")) {
      char buffer[65536];
      for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) svg.append(buffer, n);
      if (pclose(pipe) != 0) svg.clear();
    }
  ::unlink(path);
  if (svg.empty())
    return Status(Code::kUnavailable, "Graphviz's dot could not draw the plan (Debian: apt-get install graphviz)");
  MutexLock lock(mu_);
  if (Job* j = find(job)) j->plan_svg = svg;
  return svg;
}

void MetricsBoard::job_restarted(int64_t job) {
  MutexLock lock(mu_);
  if (Job* j = find(job)) ++j->restarts;
}

void MetricsBoard::job_finished(int64_t job, bool ok, const std::string& error, bool interrupted) {
  MutexLock lock(mu_);
  if (Job* j = find(job)) {
    j->state = !ok ? "failed" : interrupted ? "interrupted" : "done";
    j->error = error;
  }
  ++(ok ? finished_ok_ : finished_failed_);
}

std::string MetricsBoard::prometheus_text() const {
  MutexLock lock(mu_);
  std::string out;
  {
    Family f(&out, "rill_node_up", "gauge", "1 when the node is part of the cluster, 0 when lost or not joined.");
    for (const Node& n : nodes_)
      f.sample(fmt::format("node=\"{}\",address=\"{}\"", n.rank, label(n.address)), n.state.rfind("up", 0) == 0);
  }
  {
    Family f(&out, "rill_node_heartbeat_age_seconds", "gauge", "Seconds since the node's last heartbeat.");
    for (const Node& n : nodes_) f.sample(fmt::format("node=\"{}\"", n.rank), n.seconds_since_heartbeat);
  }
  {
    Family f(&out, "rill_node_steps_per_second", "gauge", "The running job's steps per second on the node (last 10 s).");
    for (const Node& n : nodes_)
      if (n.paced) f.sample(fmt::format("node=\"{}\"", n.rank), n.steps_per_second);
  }
  {
    Family f(&out, "rill_node_device_seconds_per_step", "gauge",
             "Time the node's devices spent computing per step of the running job (last 10 s).");
    for (const Node& n : nodes_)
      if (n.paced) f.sample(fmt::format("node=\"{}\"", n.rank), n.device_ms_per_step / 1000.0);
  }
  {
    Family f(&out, "rill_node_slow", "gauge", "1 when the node's device time per step is 1.5x the others' median.");
    for (const Node& n : nodes_)
      if (n.paced) f.sample(fmt::format("node=\"{}\"", n.rank), n.slow);
  }
  {
    Family f(&out, "rill_node_link_bytes_per_second", "gauge",
             "What the node's fastest data connection carries while it has bytes to send (last 10 s).");
    for (const Node& n : nodes_)
      if (n.link_known) f.sample(fmt::format("node=\"{}\"", n.rank), n.link_mb_per_s * 1e6);
  }
  {
    Family f(&out, "rill_node_slow_link", "gauge",
             "1 when the node's fastest data connection is 3x slower than the other nodes' median.");
    for (const Node& n : nodes_)
      if (n.link_known) f.sample(fmt::format("node=\"{}\"", n.rank), n.slow_link);
  }
  {
    Family f(&out, "rill_thread_acts", "gauge", "Acts of each actor thread of a node in the running job's phase.");
    for (const Node& n : nodes_)
      for (const Node::Thread& t : n.threads)
        f.sample(fmt::format("node=\"{}\",thread=\"{}\"", n.rank, label(t.name)), static_cast<double>(t.acts));
  }
  {
    Family f(&out, "rill_thread_busy_seconds", "gauge",
             "Time each actor thread of a node spent acting in the running job's phase.");
    for (const Node& n : nodes_)
      for (const Node::Thread& t : n.threads)
        f.sample(fmt::format("node=\"{}\",thread=\"{}\"", n.rank, label(t.name)), t.busy_seconds);
  }
  {
    Family f(&out, "rill_thread_queued_messages", "gauge",
             "Messages from other threads waiting for each actor thread, at the node's last heartbeat.");
    for (const Node& n : nodes_)
      for (const Node::Thread& t : n.threads)
        f.sample(fmt::format("node=\"{}\",thread=\"{}\"", n.rank, label(t.name)), static_cast<double>(t.queued));
  }
  {
    Family f(&out, "rill_node_received_bytes", "gauge",
             "Data-plane bytes a node received from each other node in the running job's phase.");
    for (const Node& n : nodes_)
      for (size_t from = 0; from < n.received_bytes_from.size(); ++from)
        if (static_cast<int>(from) != n.rank)
          f.sample(fmt::format("node=\"{}\",from=\"{}\"", n.rank, from), static_cast<double>(n.received_bytes_from[from]));
  }
  const Job* running = nullptr;
  for (const Job& j : jobs_)
    if (j.state == "running") running = &j;
  {
    Family f(&out, "rill_jobs_finished_total", "counter", "Jobs that ended, by outcome.");
    f.sample("outcome=\"ok\"", static_cast<double>(finished_ok_));
    f.sample("outcome=\"failed\"", static_cast<double>(finished_failed_));
  }
  if (running != nullptr) {
    const std::string job = fmt::format("job=\"{}\",name=\"{}\"", running->id, label(running->name));
    Family(&out, "rill_job_step", "gauge", "Steps the running job has done.").sample(job, running->step);
    Family(&out, "rill_job_steps", "gauge", "Steps the running job runs in all.").sample(job, running->steps);
    Family(&out, "rill_job_step_seconds", "gauge", "Wall time of the running job's last step.")
        .sample(job, running->step_seconds);
    Family(&out, "rill_job_samples_per_second", "gauge", "The running job's samples per second (recent steps).")
        .sample(job, running->samples_per_second);
    Family(&out, "rill_job_restarts_total", "counter", "Times the running job was restarted after a failure.")
        .sample(job, static_cast<double>(running->restarts));
    Family metric(&out, "rill_job_metric", "gauge", "The running job's loss and metrics at its last step.");
    for (const auto& [name, value] : running->metrics) metric.sample(job + fmt::format(",metric=\"{}\"", label(name)), value);
  }
  return out;
}

std::string MetricsBoard::status_json() const {
  MutexLock lock(mu_);
  auto j = nlohmann::ordered_json::parse(status_json_.empty() ? "{}" : status_json_, nullptr, false);
  if (j.is_discarded()) j = nlohmann::ordered_json::object();
  nlohmann::ordered_json jobs = nlohmann::ordered_json::array();
  for (const Job& job : jobs_)
    jobs.push_back({{"job_id", job.id}, {"name", job.name}, {"state", job.state}, {"step", job.step},
                    {"steps", job.steps}});
  j["jobs"] = jobs;
  return j.dump();
}

std::string MetricsBoard::job_json(int64_t id) const {
  MutexLock lock(mu_);
  for (const Job& job : jobs_) {
    if (job.id != id) continue;
    nlohmann::ordered_json j;
    j["job_id"] = job.id;
    j["name"] = job.name;
    j["state"] = job.state;
    if (!job.error.empty()) j["error"] = job.error;
    j["step"] = job.step;
    j["steps"] = job.steps;
    j["global_batch"] = job.global_batch;
    j["restarts"] = job.restarts;
    j["step_seconds"] = job.step_seconds;
    j["samples_per_second"] = job.samples_per_second;
    nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
    for (const auto& [name, value] : job.metrics) metrics[name] = std::isfinite(value) ? nlohmann::ordered_json(value) : nullptr;
    j["metrics"] = metrics;
    // Every metric's curve: {"names": [...], "points": [[step, v...], ...]},
    // and the loss's alone as [step, loss] pairs.
    auto value = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
    const size_t row = job.curve_names.size() + 1;
    size_t loss_at = 0;
    for (size_t k = 0; k < job.curve_names.size(); ++k)
      if (job.curve_names[k] == "loss") loss_at = k + 1;
    nlohmann::ordered_json points = nlohmann::ordered_json::array(), loss = nlohmann::ordered_json::array();
    for (size_t r = 0; r < job.curve.size() / row; ++r) {
      nlohmann::ordered_json p = nlohmann::ordered_json::array({static_cast<int64_t>(job.curve[r * row])});
      for (size_t k = 1; k < row; ++k) p.push_back(value(job.curve[r * row + k]));
      if (loss_at > 0) loss.push_back({static_cast<int64_t>(job.curve[r * row]), value(job.curve[r * row + loss_at])});
      points.push_back(std::move(p));
    }
    j["curves"] = {{"names", job.curve_names}, {"points", points}};
    j["loss_curve"] = loss;  // [step, loss] pairs
    // Bytes each node received from each other node in the running phase
    // ([from][to], as the result's traffic_bytes), from the heartbeats.
    if (job.state == "running" && !nodes_.empty()) {
      std::vector<std::vector<int64_t>> traffic(nodes_.size(), std::vector<int64_t>(nodes_.size(), 0));
      for (const Node& n : nodes_)
        for (size_t from = 0; from < n.received_bytes_from.size() && from < nodes_.size(); ++from)
          if (n.rank >= 0 && static_cast<size_t>(n.rank) < nodes_.size())
            traffic[from][static_cast<size_t>(n.rank)] = n.received_bytes_from[from];
      j["traffic_bytes"] = traffic;
    }
    auto config = nlohmann::ordered_json::parse(job.job_text, nullptr, false);
    j["config"] = config.is_discarded() ? nlohmann::ordered_json(job.job_text) : config;
    return j.dump();
  }
  return {};
}

}  // namespace rill
