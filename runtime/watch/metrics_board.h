// What the master knows about its cluster and its jobs, in the forms that are
// watched from outside: Prometheus text (/metrics) and JSON (/api/status,
// /api/jobs/ID). Written by the agent's threads (the control loop publishes
// the node table; a job's sink reports each step), read by the HTTP server's
// threads; every method takes one mutex, briefly.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mutex.h"
#include "base/status.h"

namespace rill {

class MetricsBoard {
 public:
  // One node as the control loop sees it.
  struct Node {
    int rank = 0;
    std::string address;
    std::string state;  // "up (master)", "up", "lost", "not joined"
    double seconds_since_heartbeat = 0;
    bool paced = false;  // the pace fields hold a running job's figures
    double steps_per_second = 0;
    double device_ms_per_step = 0;
    bool slow = false;
    bool link_known = false;  // the link fields hold a running job's figures
    double link_mb_per_s = 0;  // its fastest data connection while busy (runtime/watch/link_pace.h)
    bool slow_link = false;
    struct Thread {
      std::string name;
      int64_t acts = 0;
      double busy_seconds = 0;
      int64_t queued = 0;
    };
    std::vector<Thread> threads;              // the running phase's, per thread
    std::vector<int64_t> received_bytes_from;  // the running phase's, per sending node
  };

  // The control loop's view: the node table, and the status JSON it answers
  // `rill status` with.
  void publish_cluster(std::vector<Node> nodes, std::string status_json);

  void job_started(int64_t job, const std::string& name, const std::string& job_text, int64_t steps,
                   int64_t global_batch);
  // A training step's metrics, from the sink's thread: cheap (no I/O).
  void job_step(int64_t job, int64_t step, std::span<const std::string> names, std::span<const double> values);
  void job_restarted(int64_t job);
  // The job's whole plan as Graphviz DOT (compiler::plan_dot), to be drawn.
  void job_plan(int64_t job, std::string dot);
  // The plan drawn as SVG (Graphviz's `dot`, run once per job and kept), or
  // an error: no such job, no plan kept (too large), dot missing or failing.
  StatusOr<std::string> job_plan_svg(int64_t job);
  // `interrupted`: it ended early, as asked (rill stop), not failed.
  void job_finished(int64_t job, bool ok, const std::string& error, bool interrupted = false);

  std::vector<Node> nodes() const;
  std::string prometheus_text() const;
  std::string status_json() const;
  // The job's JSON, or "" for a job this board never saw.
  std::string job_json(int64_t job) const;

  static constexpr size_t kKeptJobs = 32;        // finished jobs kept for /api/jobs
  static constexpr size_t kCurvePoints = 4096;   // loss points kept per job (every other one dropped beyond)

 private:
  struct Job {
    int64_t id = 0;
    std::string name, job_text;
    std::string state = "running";  // "running", "done", "interrupted" (stopped early), "failed"
    std::string error;
    int64_t steps = 0, global_batch = 0;
    int64_t step = 0;               // steps done
    int64_t restarts = 0;
    double started = 0;             // steady seconds
    double last_step_at = 0;
    double step_seconds = 0;        // of the last step
    double samples_per_second = 0;  // over the last steps (an exponential mean)
    std::map<std::string, double> metrics;
    // Each kept step's row: the step, then every metric in curve_names'
    // order, flat; thinned to kCurvePoints rows by keeping every
    // `stride`-th step. A row that lacks a metric has NaN there.
    std::vector<std::string> curve_names;
    std::vector<double> curve;
    std::string plan_dot, plan_svg;
    int64_t stride = 1;
  };
  Job* find(int64_t job) REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<Node> nodes_ GUARDED_BY(mu_);
  std::string status_json_ GUARDED_BY(mu_);
  std::vector<Job> jobs_ GUARDED_BY(mu_);  // oldest first
  int64_t finished_ok_ GUARDED_BY(mu_) = 0;
  int64_t finished_failed_ GUARDED_BY(mu_) = 0;
};

}  // namespace rill
