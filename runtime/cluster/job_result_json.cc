// A job's result and timeline as JSON (job_runner.h): what `--result`
// writes and a submitter receives, and the Chrome trace of every act.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/actor_id.h"
#include "base/safe_files.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/ops/cpu_kernels_info.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cluster/job_checkpoints.h"
#include "runtime/cluster/job_runner.h"

namespace rill {

std::string result_json(const JobResult& result) {
  nlohmann::ordered_json j;
  j["status"] = result.status.ok() ? "ok" : "error";
  if (!result.status.ok()) j["error"] = result.status.to_string();
  j["steps"] = result.steps;
  if (result.interrupted) {
    j["interrupted"] = true;
    j["planned_steps"] = result.planned_steps;
  }
  if (result.start_step > 0) j["start_step"] = result.start_step;
  if (result.checkpoints_written > 0) j["checkpoints_written"] = result.checkpoints_written;
  if (result.control_bytes_from_nodes > 0) j["control_bytes_from_nodes"] = result.control_bytes_from_nodes;
  if (!result.checkpoints.empty()) {
    // Each complete one: training's longest wait on it and the slowest node's write.
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const CheckpointRecord& c : result.checkpoints)
      list.push_back(nlohmann::ordered_json::parse(checkpoint_metrics_line(c)));
    j["checkpoints"] = list;
  }
  j["global_batch"] = result.global_batch;
  j["final_loss"] = std::isfinite(result.final_loss) ? nlohmann::ordered_json(result.final_loss) : nullptr;
  // Metrics of the eval pass when there is one, else the last training step's.
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
  for (const auto& [name, value] : result.eval_metrics.empty() ? result.train_metrics : result.eval_metrics)
    metrics[name] = value;
  j["metrics"] = metrics;
  nlohmann::ordered_json train_metrics = nlohmann::ordered_json::object();
  for (const auto& [name, value] : result.train_metrics) train_metrics[name] = value;
  j["train_metrics"] = train_metrics;
  if (!result.rank_metrics.empty()) j["rank_metrics"] = result.rank_metrics;  // the mirrored view: [rank]{name: value}
  if (result.eval_samples > 0) j["eval_samples"] = result.eval_samples;
  j["train_seconds"] = result.train_seconds;
  j["samples_per_sec"] = result.samples_per_sec;
  j["steady_samples_per_sec"] = result.steady_samples_per_sec;
  // The CPU code behind those figures in this (the master's) process: which
  // copy of the elementwise loops, which OpenBLAS kernels.
  const CpuKernels cpu = cpu_kernels();
  j["cpu_kernels"] = {{"loops", cpu.loops}, {"blas", cpu.blas}};
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  for (const auto& [name, value] : result.variables) {
    nlohmann::ordered_json v;
    v["shape"] = value.shape;
    if (value.values.size() <= 64) v["values"] = value.values;
    variables[name] = v;
  }
  j["variables"] = variables;
  if (!result.fetched.empty()) {  // every value, row-major
    nlohmann::ordered_json fetched = nlohmann::ordered_json::object();
    for (const auto& [name, value] : result.fetched)
      fetched[name] = {{"shape", value.shape}, {"values", value.values}};
    j["fetched"] = fetched;
  }
  if (!result.traffic.empty()) j["traffic"] = result.traffic;  // [from][to] messages
  if (!result.traffic_bytes.empty()) j["traffic_bytes"] = result.traffic_bytes;  // [from][to] bytes
  j["device_synchronizes"] = result.device_synchronizes;
  if (result.seconds_to_first_step > 0) j["seconds_to_first_step"] = result.seconds_to_first_step;
  if (!result.generated.empty()) j["generated"] = result.generated;
  if (const int64_t peak = CudaContext::device_bytes_peak(); peak > 0) j["peak_device_bytes"] = peak;
  if (!result.restarts.empty()) {
    nlohmann::ordered_json restarts = nlohmann::ordered_json::array();
    for (const JobRestart& r : result.restarts)
      restarts.push_back({{"error", r.error},
                          {"failed_at_step", r.failed_at_step},
                          {"resumed_from_step", r.resumed_from_step},
                          {"steps_lost", r.failed_at_step - r.resumed_from_step},
                          {"from", r.from_memory ? "memory" : r.resumed_from_step > 0 ? "checkpoint" : "start"},
                          {"nodes", r.nodes},
                          {"seconds_until_whole", r.seconds_until_whole},
                          {"seconds_to_first_step", r.seconds_to_first_step}});
    j["restarts"] = restarts;
  }
  if (result.buckets.bytes > 0)
    j["buckets_by_link"] = {{"bytes", result.buckets.bytes},
                            {"reason", result.buckets.reason},
                            {"from_step", result.buckets.from_step}};
  if (!result.nodes_from_step.empty()) {
    nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
    for (const auto& [step, count] : result.nodes_from_step) nodes.push_back({{"from_step", step}, {"nodes", count}});
    j["nodes_from_step"] = nodes;
  }
  j["loss_curve"] = result.loss_curve;
  // Generated bytes need not be UTF-8: a broken sequence becomes U+FFFD.
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string trace_json(const std::vector<ActorTraceRecord>& traces) {
  nlohmann::json events = nlohmann::json::array();
  // Each node's times count from its own first act: nodes on other machines
  // have other steady clocks, so only times within a node compare.
  std::map<uint32_t, int64_t> origins;
  for (const auto& t : traces) {
    int64_t& origin = origins.try_emplace(ActorId::node(t.id), std::numeric_limits<int64_t>::max()).first->second;
    for (int64_t b : t.trace.begin_ns)
      if (b > 0) origin = std::min(origin, b);
  }
  // One row (tid) per worker thread, as it runs its actors one act at a time;
  // one process (pid) per node.
  std::set<uint64_t> threads;
  // A GPU's acts only enqueue work: per GPU thread, its acts' work on the
  // stream, each from when it could start (enqueued, and the work before it
  // done) to when the thread saw it complete, on a row of its own.
  struct StreamSpan {
    int64_t enqueued, done;
    const std::string* name;
    size_t step;
  };
  std::map<uint64_t, std::vector<StreamSpan>> streams;
  for (const auto& t : traces) {
    const int64_t origin = origins[ActorId::node(t.id)];
    const uint64_t thread = ActorId::thread_key(t.id);
    if (threads.insert(thread).second)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", ActorId::node(t.id)},
                        {"tid", thread},
                        {"args",
                         {{"name", fmt::format("{}{}.{}", device_type_name(ActorId::device_type(t.id)),
                                               ActorId::device(t.id), ActorId::stream(t.id))}}}});
    for (size_t s = 0; s < t.trace.begin_ns.size() && s < t.trace.end_ns.size(); ++s) {
      if (t.trace.begin_ns[s] == 0) continue;
      const auto per = static_cast<size_t>(std::max(1, t.acts_per_step));
      nlohmann::json args = {{"step", s / per}, {"micro", s % per}};
      if (!t.collective.empty()) args["collective"] = t.collective;
      if (s < t.trace.done_ns.size() && t.trace.done_ns[s] > 0) {
        args["done_us"] = (t.trace.done_ns[s] - origin) / 1000.0;
        streams[thread].push_back({t.trace.end_ns[s], t.trace.done_ns[s], &t.name, s / per});
      }
      events.push_back({{"ph", "X"},
                        {"name", t.name},
                        {"pid", ActorId::node(t.id)},
                        {"tid", thread},
                        {"args", std::move(args)},
                        {"ts", (t.trace.begin_ns[s] - origin) / 1000.0},
                        {"dur", (t.trace.end_ns[s] - t.trace.begin_ns[s]) / 1000.0}});
    }
  }
  for (auto& [thread, spans] : streams) {
    std::stable_sort(spans.begin(), spans.end(), [](const StreamSpan& a, const StreamSpan& b) { return a.done < b.done; });
    // The thread key with the stream bits all set (device threads are
    // stream 0): a tid of 32 bits, as trace viewers take them.
    const uint64_t row = thread | ((uint64_t{1} << ActorId::kStreamBits) - 1);
    const uint64_t id = thread << ActorId::kStreamShift;  // its actors' node and device
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", ActorId::node(id)},
                      {"tid", row},
                      {"args", {{"name", fmt::format("cuda{} stream (work complete)", ActorId::device(id))}}}});
    const int64_t origin = origins[ActorId::node(id)];
    int64_t free_at = 0;  // when the work before was done
    for (const StreamSpan& span : spans) {
      const int64_t from = std::min(span.done, std::max(span.enqueued, free_at));
      events.push_back({{"ph", "X"},
                        {"name", *span.name},
                        {"pid", ActorId::node(id)},
                        {"tid", row},
                        {"args", {{"step", span.step}}},
                        {"ts", (from - origin) / 1000.0},
                        {"dur", (span.done - from) / 1000.0}});
      free_at = span.done;
    }
  }
  return nlohmann::json{{"traceEvents", events}}.dump();
}

Status write_trace(const std::string& path, const std::vector<ActorTraceRecord>& traces) {
  return write_file(path, trace_json(traces), "the trace file");
}

}  // namespace rill
