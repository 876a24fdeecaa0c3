// The training phase of a job's run (job_phases.h): progress lines and the
// metrics file, where it starts (afresh, a checkpoint, the nodes' memory),
// its checkpoints, the phase run by the executor, and its figures taken
// into the result.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/safe_files.h"
#include "runtime/cluster/job_checkpoints.h"
#include "runtime/cluster/job_phases.h"
#include "runtime/cluster/job_resume.h"
#include "runtime/cluster/progress.h"

namespace rill {
namespace {

using MetricsFile = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

// The metrics file, appended to: a restarted job's lines follow its first
// attempt's. None when the options name none.
StatusOr<MetricsFile> open_metrics(const std::string& path) {
  MetricsFile metrics(nullptr, &std::fclose);
  if (path.empty()) return metrics;
  RILL_ASSIGN_OR_RETURN(int fd, open_for_write(path, true, "the metrics file"));
  metrics.reset(::fdopen(fd, "a"));
  if (!metrics) {
    const int error = errno;
    ::close(fd);
    return invalid_argument("cannot write the metrics file '{}': {}", path, std::strerror(error));
  }
  return metrics;
}

// Where training starts: the nodes' memory (live membership), a
// checkpoint, or step 0.
Status start_point(JobRun& run, RunOptions& run_options) {
  const JobRunOptions& options = run.options;
  if (options.start_from_memory >= 0) {
    if (options.start_from_memory >= run.result.steps)
      return invalid_argument("the nodes' memory is at step {}: the job runs {} steps, nothing is left to run",
                              options.start_from_memory, run.result.steps);
    run_options.start_step = run.result.start_step = options.start_from_memory;
    return {};
  }
  if (options.resume.empty()) return {};
  return resume_from(run.job, options.resume, run.result, run_options, options.out, options.checkpoint_access);
}

// A line that starts a run (or a restarted attempt) in the metrics file,
// which runs append to: `rill plot` draws each run apart.
void mark_run(std::FILE* metrics, const JobRun& run) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  nlohmann::ordered_json j;
  j["run"] = run.job.name;
  j["start_step"] = run.result.start_step;
  j["steps"] = run.result.planned_steps;
  j["global_batch"] = run.result.global_batch;
  j["started"] = when;
  fmt::print(metrics, "{}\n", j.dump());
  std::fflush(metrics);
}

// The timeline, into the result and the trace file as asked.
void keep_trace(JobRun& run, const std::vector<ActorTraceRecord>& traces) {
  const JobRunOptions& options = run.options;
  if (options.trace) run.result.trace_json = trace_json(traces);
  if (options.trace_file.empty()) return;
  Status traced = write_trace(options.trace_file, traces);
  if (!traced.ok() && options.out) {
    fmt::print(options.out, "warning: {}\n", traced.to_string());
  } else if (options.out) {
    size_t acts = 0;
    for (const ActorTraceRecord& actor : traces)
      acts += static_cast<size_t>(std::count_if(actor.trace.begin_ns.begin(), actor.trace.begin_ns.end(),
                                                [](int64_t b) { return b > 0; }));
    fmt::print(options.out, "trace of {} act(s) of {} actor(s) written to {}\n", acts, traces.size(),
               options.trace_file);
  }
}

}  // namespace

Status train(JobRun& run, PhasePlan phase, int64_t log_every) {
  const JobRunOptions& options = run.options;
  JobResult& result = run.result;
  if (options.start_from_memory >= 0 && options.start_from_memory == result.steps && options.model_in_memory) {
    // Trained already: what follows training runs with the model kept.
    RILL_ASSIGN_OR_RETURN(result.variables, options.model_in_memory(result.steps));
    result.start_step = result.steps;
    return {};
  }
  Progress progress(options.out, options.on_line, result.steps, result.global_batch, log_every, &result);
  RILL_ASSIGN_OR_RETURN(MetricsFile metrics, open_metrics(options.metrics_file));
  if (metrics) progress.write_to(metrics.get(), options.node_pace);
  const graph::Optimizer& opt = run.job.optimizer;
  progress.schedule_lr({opt.lr, opt.warmup_steps, opt.decay_steps, opt.min_lr});
  RunOptions run_options;
  run_options.data_access = options.data_access;
  run_options.stall_timeout_s = options.stall_timeout_s;
  run_options.liveness = options.liveness;
  run_options.trace = !options.trace_file.empty() || options.trace;
  run_options.on_step = [&progress](const StepMetrics& m) { progress.on_step(m); };
  run_options.stop = options.stop;
  RILL_RETURN_IF_ERROR(start_point(run, run_options));
  if (metrics) mark_run(metrics.get(), run);
  std::unique_ptr<JobCheckpoints> checkpoints;
  if (!run.job.checkpoint.dir.empty()) {
    RILL_ASSIGN_OR_RETURN(checkpoints, JobCheckpoints::make(run.job, run.cluster, phase.plan, options,
                                                            run_options.start_step, metrics.get()));
    checkpoints->attach(run_options, phase);
  }
  // The checkpoints each complete step made (the meta.json written); the
  // last ones may still be on their way to disk.
  auto finish_checkpoints = [&]() -> Status {
    if (!checkpoints) return {};
    Status written = checkpoints->finish();
    result.checkpoints = checkpoints->records();
    result.checkpoints_written = static_cast<int64_t>(result.checkpoints.size());
    return written;
  };
  RunReport report = run.execute(phase, run_options);
  result.control_bytes_from_nodes = report.control_bytes_from_nodes;
  progress.clear_bar();
  RILL_RETURN_IF_ERROR(report.status);
  if (options.regroup && options.regroup->load() && report.steps < result.steps && !run.stopped()) {
    // Every node holds step report.steps: the caller goes on from there.
    result.steps = report.steps;
    result.regrouped = true;
    result.train_seconds = report.seconds;
    (void)finish_checkpoints();
    return Status(Code::kUnavailable,
                  fmt::format("ended at step {}, as the master asked, to go on with another plan", report.steps));
  }
  if (report.steps < result.steps) result.steps = report.steps;
  result.interrupted = report.steps < result.planned_steps || run.stopped();
  keep_trace(run, report.traces);
  if (Status written = finish_checkpoints(); !written.ok()) return written.with_context("checkpoint");
  result.train_seconds = report.seconds;
  result.samples_per_sec =
      report.seconds > 0 ? (result.steps - result.start_step) * result.global_batch / report.seconds : 0.0;
  result.steady_samples_per_sec = progress.steady_samples_per_sec();
  if (!result.loss_curve.empty()) result.final_loss = result.loss_curve.back();
  result.variables = std::move(report.variables);
  result.traffic = std::move(report.traffic);
  result.traffic_bytes = std::move(report.traffic_bytes);
  result.device_synchronizes = report.device_synchronizes;
  return {};
}

}  // namespace rill
