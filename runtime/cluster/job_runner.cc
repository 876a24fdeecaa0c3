#include "runtime/cluster/job_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/printable.h"
#include "base/safe_files.h"
#include "base/actor_id.h"
#include "compiler/compiler.h"
#include "compiler/gradient_norm.h"
#include "compiler/optimizer.h"
#include "compiler/pserver.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/ops/lr_schedule.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/eager/generate.h"
#include "runtime/cluster/job_checkpoints.h"
#include "runtime/cluster/job_resume.h"
#include "runtime/cluster/progress.h"

namespace rill {
namespace {

// A small tensor's values nested by its shape, 4 decimals: [[2.0000], [3.0000]].
std::string nested_values(const std::vector<int64_t>& shape, const std::vector<float>& values, size_t dim,
                          size_t* next) {
  if (dim == shape.size()) return fmt::format("{:.4f}", values[(*next)++]);
  std::string out = "[";
  for (int64_t i = 0; i < shape[dim]; ++i) out += (i ? ", " : "") + nested_values(shape, values, dim + 1, next);
  return out + "]";
}

// One line per fetched tensor, as the master prints them after training:
// "w:[[2.0000], [3.0000]]", a rank's own (mirrored view) "[rank1] w:[...]";
// a tensor of more than 64 elements by its shape only.
std::vector<std::string> fetched_lines(const std::map<std::string, VariableValue>& fetched) {
  std::vector<std::pair<int, std::string>> sorted;  // by rank, then name
  for (const auto& [name, value] : fetched) {
    const size_t at = name.rfind('@');
    const int rank = at == std::string::npos ? -1 : std::atoi(name.c_str() + at + 1);
    const std::string tensor = at == std::string::npos ? name : name.substr(0, at);
    std::string line = rank >= 0 ? fmt::format("[rank{}] {}:", rank, tensor) : tensor + ":";
    size_t next = 0;
    if (value.values.size() <= 64 && value.values.size() == static_cast<size_t>(num_elements(value.shape)))
      line += nested_values(value.shape, value.values, 0, &next);
    else
      line += fmt::format(" shape {} (every value in the result JSON)", shape_string(value.shape));
    sorted.emplace_back(rank, std::move(line));
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> lines;
  for (auto& [rank, line] : sorted) lines.push_back(std::move(line));
  return lines;
}

StatusOr<compiler::Cluster> cluster_for(const graph::Job& job, const JobRunOptions& options) {
  return compiler::parse_devices(options.devices.empty() ? job.train.devices : options.devices, options.num_nodes);
}

}  // namespace

JobResult run_job(const graph::Job& job, const JobRunOptions& options) {
  JobResult result;
  auto cluster = cluster_for(job, options);
  if (!cluster.ok()) {
    result.status = cluster.status();
    return result;
  }
  // Node 0's plan here; every other node compiles its own (PhasePlan).
  const std::string devices = options.devices.empty() ? job.train.devices : options.devices;
  compiler::CompileOptions train_options;
  train_options.steps = options.steps;
  train_options.data_access = options.data_access;
  if (options.num_nodes > 1) train_options.node = 0;
  auto train_plan = compiler::compile(job, *cluster, train_options);
  if (!train_plan.ok()) {
    result.status = train_plan.status();
    return result;
  }
  auto verified = compiler::verify_plan(*train_plan);
  if (!verified.ok()) {
    result.status = verified.status();
    return result;
  }
  result.steps = (*verified)->steps();
  result.planned_steps = result.steps;
  result.global_batch = (*verified)->global_batch();
  if (options.on_plan) options.on_plan(result.steps, result.global_batch);
  // What the run is about to do, to the terminal and to a submitter
  // following it (--follow, SubmitOptions::on_line) alike.
  const auto say = [&options](const std::string& line) {
    if (options.out) fmt::print(options.out, "{}\n", line);
    if (options.on_line) options.on_line(line);
  };
  if (options.out || options.on_line) {
    // Devices other than the job's own are named with who chose them.
    const std::string chosen = devices == job.train.devices
                                   ? std::string()
                                   : fmt::format(", devices from {}; the job's train.devices is {}",
                                                 options.devices_from, job.train.devices);
    say(fmt::format("job '{}': {} steps of global batch {} on {} node(s) x {} ({} tasks{})", job.name, result.steps,
                    result.global_batch, options.num_nodes, devices, (*verified)->num_tasks(), chosen));
  }
  if (options.out || options.on_line) {
    const plan::Plan& p = **verified;
    // How the step is cut, where it is (stages, micro-batches, schedule).
    if (p.micro_batches() > 1 || p.stages() > 1)
      say(fmt::format("{} stage(s), {} micro-batch(es) of {} rows per step, schedule {}", p.stages(),
                      p.micro_batches(), p.global_batch() / std::max<int64_t>(1, p.micro_batches()),
                      p.schedule() ? p.schedule()->str() : "1f1b"));
    // Mixed precision: how many casts the compiler put in, and the scale.
    if (job.train.precision == graph::Precision::kBF16 || job.train.precision == graph::Precision::kF16) {
      std::set<std::string> casts;  // the forward's cast ops, by name (not their tasks per device)
      for (const plan::Task* t : *p.tasks()) {
        const std::string name = t->name()->str();
        if (t->kind() == plan::TaskKind::Compute && t->op_type() && t->op_type()->str() == "cast" &&
            name.rfind("grad/", 0) != 0 && name.rfind("recompute/", 0) != 0)
          casts.insert(name.substr(0, name.rfind('@')));
      }
      // With several nodes the plan here is node 0's: its casts.
      say(fmt::format("mixed precision: matmuls multiply {} copies of their inputs ({} casts{}); weights, optimizer "
                      "state and every other op stay f32{}",
                      graph::to_string(job.train.precision), casts.size(), options.num_nodes > 1 ? " on node 0" : "",
                      cluster->device_type == DeviceType::kCpu
                          ? " (on cpu devices a 16-bit matmul widens its inputs and multiplies in f32: the 16-bit "
                            "values, not the speed)"
                          : ""));
    }
    if (compiler::loss_scale_variable(job.train))
      say(fmt::format("loss scaling: from {:g}, halved on an overflow (the step skipped), doubled after {} good steps",
                      compiler::first_loss_scale(job.train), job.train.loss_scale_window));
    // Parameter servers: who holds the blocks, who trains (the blocks
    // themselves: rill plan, or the master's log with print_log).
    if (job.pserver_mode())
      if (auto layout = compiler::pserver_layout(job, *cluster); layout.ok()) {
        const std::string described = compiler::describe_pserver_layout(*layout, job);
        say(fmt::format("{}; {} block(s)", described.substr(0, described.find('\n')), layout->blocks.size()));
      }
    // What is read from files, which the first step waits for (a large
    // dataset takes seconds to load).
    std::vector<std::string> files;
    auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
    if (p.datasets())
      for (const plan::Dataset* d : *p.datasets()) {
        const std::string kind = str(d->kind());
        if (kind == "idx")
          files.push_back(fmt::format("'{}' (images {}, labels {})", str(d->name()), str(d->images()), str(d->labels())));
        else if (kind == "csv" || kind == "text" || kind == "tokens")
          files.push_back(fmt::format("'{}' ({} {})", str(d->name()), kind, str(d->path())));
      }
    if (!files.empty()) say(fmt::format("reading dataset(s) {}", fmt::join(files, ", ")));
    // Out before anything that may fail on stderr: piped, stdout is buffered
    // and the error would come first.
    if (options.out) std::fflush(options.out);
  }

  Progress progress(options.out, options.on_line, result.steps, result.global_batch, (*verified)->log_every(), &result);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> metrics(nullptr, &std::fclose);
  if (!options.metrics_file.empty()) {
    // Appended to: a restarted job's lines follow its first attempt's.
    auto fd = open_for_write(options.metrics_file, true, "the metrics file");
    if (fd.ok()) metrics.reset(::fdopen(*fd, "a"));
    if (!metrics) {
      if (fd.ok()) ::close(*fd);
      result.status = fd.ok() ? invalid_argument("cannot write the metrics file '{}': {}", options.metrics_file,
                                                 std::strerror(errno))
                              : fd.status();
      return result;
    }
    progress.write_to(metrics.get(), options.node_pace);
  }
  const graph::Optimizer& opt = job.optimizer;
  progress.schedule_lr({opt.lr, opt.warmup_steps, opt.decay_steps, opt.min_lr});
  RunOptions run_options;
  run_options.data_access = options.data_access;
  run_options.stall_timeout_s = options.stall_timeout_s;
  run_options.trace = !options.trace_file.empty() || options.trace;
  run_options.on_step = [&progress](const StepMetrics& m) { progress.on_step(m); };
  run_options.stop = options.stop;
  if (options.start_from_memory >= 0) {
    if (options.start_from_memory >= result.steps) {
      result.status = invalid_argument("the nodes' memory is at step {}: the job runs {} steps, nothing is left to run",
                                       options.start_from_memory, result.steps);
      return result;
    }
    run_options.start_step = result.start_step = options.start_from_memory;
  } else if (!options.resume.empty()) {
    Status resumed = resume_from(job, options.resume, result, run_options, options.out, options.checkpoint_access);
    if (!resumed.ok()) {
      result.status = resumed;
      return result;
    }
  }
  std::unique_ptr<JobCheckpoints> checkpoints;
  PhasePlan train_phase{std::move(*train_plan), devices, train_options, {}};
  train_phase.compile.steps = result.steps;
  if (!job.checkpoint.dir.empty()) {
    auto made = JobCheckpoints::make(job, *cluster, train_phase.plan, options, run_options.start_step, metrics.get());
    if (!made.ok()) {
      result.status = made.status();
      return result;
    }
    checkpoints = std::move(*made);
    checkpoints->attach(run_options, train_phase);
  }
  // The checkpoints each complete step made (the meta.json written).
  auto finish_checkpoints = [&]() -> Status {
    if (!checkpoints) return {};
    Status written = checkpoints->finish();  // the last checkpoints may still be on their way to disk
    result.checkpoints = checkpoints->records();
    result.checkpoints_written = static_cast<int64_t>(result.checkpoints.size());
    return written;
  };
  PlanExecutor execute = options.executor ? options.executor : [](const PhasePlan& phase, const RunOptions& run) {
    return run_plan(phase.plan, run);
  };
  RunReport train = execute(train_phase, run_options);
  result.control_bytes_from_nodes = train.control_bytes_from_nodes;
  progress.clear_bar();
  if (!train.status.ok()) {
    result.status = train.status;
    return result;
  }
  const auto stopped = [&options] { return options.stop && options.stop->load(); };
  if (options.regroup && options.regroup->load() && train.steps < result.steps && !stopped()) {
    // Every node holds step train.steps: the caller goes on from there.
    result.steps = train.steps;
    result.regrouped = true;
    result.status = Status(Code::kUnavailable, fmt::format("ended at step {} to take back a node", train.steps));
    (void)finish_checkpoints();
    return result;
  }
  if (train.steps < result.steps) result.steps = train.steps;
  result.interrupted = train.steps < result.planned_steps || stopped();
  if (options.trace) result.trace_json = trace_json(train.traces);
  if (!options.trace_file.empty()) {
    Status traced = write_trace(options.trace_file, train.traces);
    if (!traced.ok() && options.out) fmt::print(options.out, "warning: {}\n", traced.to_string());
    else if (options.out) {
      size_t acts = 0;
      for (const ActorTraceRecord& actor : train.traces)
        acts += static_cast<size_t>(std::count_if(actor.trace.begin_ns.begin(), actor.trace.begin_ns.end(),
                                                  [](int64_t b) { return b > 0; }));
      fmt::print(options.out, "trace of {} act(s) of {} actor(s) written to {}\n", acts, train.traces.size(),
                 options.trace_file);
    }
  }
  if (Status written = finish_checkpoints(); !written.ok()) {
    result.status = written.with_context("checkpoint");
    return result;
  }
  result.train_seconds = train.seconds;
  result.samples_per_sec =
      train.seconds > 0 ? (result.steps - result.start_step) * result.global_batch / train.seconds : 0.0;
  result.steady_samples_per_sec = progress.steady_samples_per_sec();
  if (!result.loss_curve.empty()) result.final_loss = result.loss_curve.back();
  result.variables = std::move(train.variables);
  result.traffic = std::move(train.traffic);
  result.traffic_bytes = std::move(train.traffic_bytes);
  result.device_synchronizes = train.device_synchronizes;

  if (job.eval && !stopped()) {
    compiler::CompileOptions eval_options;
    eval_options.mode = compiler::Mode::kEval;
    eval_options.data_access = options.data_access;
    if (options.num_nodes > 1) eval_options.node = 0;
    auto eval_plan = compiler::compile(job, *cluster, eval_options);
    if (!eval_plan.ok()) {
      result.status = eval_plan.status().with_context("eval");
      return result;
    }
    RunOptions eval_run;
    eval_run.data_access = options.data_access;
    eval_run.stall_timeout_s = options.stall_timeout_s;
    eval_run.stop = options.stop;
    for (const auto& [name, value] : result.variables) eval_run.initial_values[name] = value.values;
    std::map<std::string, double> sums;
    int64_t eval_steps = 0;
    eval_run.on_step = [&](const StepMetrics& m) {
      for (size_t i = 0; i < m.names.size(); ++i) sums[m.names[i]] += m.values[i];
      ++eval_steps;
    };
    auto eval_verified = compiler::verify_plan(*eval_plan);
    if (!eval_verified.ok()) {
      result.status = eval_verified.status().with_context("eval");
      return result;
    }
    eval_options.steps = (*eval_verified)->steps();
    const int64_t eval_batch = (*eval_verified)->global_batch();
    RunReport eval = execute(PhasePlan{std::move(*eval_plan), devices, eval_options}, eval_run);
    if (!eval.status.ok()) {
      result.status = eval.status.with_context("eval");
      return result;
    }
    result.eval_samples = eval_steps * eval_batch;
    for (const auto& [name, sum] : sums) result.eval_metrics[name] = eval_steps ? sum / eval_steps : 0.0;
    // Stopped while it ran: the metrics are over the samples it saw.
    const bool cut = eval.steps < eval_options.steps;
    result.interrupted = result.interrupted || cut;
    std::string line = cut ? fmt::format("eval on '{}' (interrupted: {} of {} samples):", job.eval->dataset,
                                         result.eval_samples, eval_options.steps * eval_batch)
                           : fmt::format("eval on '{}' ({} samples):", job.eval->dataset, result.eval_samples);
    for (const auto& [name, value] : result.eval_metrics) line += fmt::format("  {} {:.4f}", name, value);
    if (options.out) fmt::print(options.out, "{}\n", line);
    if (options.on_line) options.on_line(line);
  }
  if (job.generate && !stopped()) {
    // Text from the trained model, sampled on the master from its variables.
    eager::Tensors variables;
    Status read;
    for (const graph::Variable& v : job.variables)
      if (auto value = result.variables.find(v.name); value != result.variables.end() && read.ok()) {
        auto t = eager::HostTensor::variable(v.name, TensorMeta{value->second.shape, v.dtype}, value->second.values);
        if (t.ok()) variables[v.name] = std::move(*t);
        read = t.status();
      }
    auto text = read.ok() ? eager::generate_text(job, variables, *job.generate) : StatusOr<std::string>(read);
    if (!text.ok()) {
      result.status = text.status().with_context("generate");
      return result;
    }
    result.generated = *text;
    // Printed with control bytes and non-UTF-8 escaped (the result keeps the bytes).
    const std::string line =
        fmt::format("generated ({} bytes after the prompt):\n{}", job.generate->tokens, printable(*text));
    if (options.out) fmt::print(options.out, "{}\n", line);
    if (options.on_line) options.on_line(line);
  }
  // A small model's learned values too, as the seeds' examples print w
  // (at most kSmallVariable elements each, the job's own variables: not
  // loss scaling's state; the result JSON has them all).
  constexpr size_t kSmallVariable = 8;
  std::map<std::string, VariableValue> shown = result.fetched;
  for (const auto& [name, value] : result.variables) {
    bool own = false;
    for (const graph::Variable& v : job.variables) own = own || v.name == name;
    if (!own) continue;
    bool fetched = false;
    for (const auto& [tensor, v] : result.fetched) fetched = fetched || tensor == name || tensor.rfind(name + "@", 0) == 0;
    if (!fetched && !value.values.empty() && value.values.size() <= kSmallVariable) shown[name] = value;
  }
  for (const std::string& line : fetched_lines(shown)) {
    if (options.out) fmt::print(options.out, "{}\n", line);
    if (options.on_line) options.on_line(line);
  }
  std::string done = result.interrupted
                         ? fmt::format("interrupted at step {} of {}: {} steps in {:.2f} s, {:.0f} samples/s, final "
                                       "loss {:.6g}",
                                       result.steps, result.planned_steps, result.steps - result.start_step,
                                       result.train_seconds, result.samples_per_sec, result.final_loss)
                         : fmt::format("done: {} steps in {:.2f} s, {:.0f} samples/s, final loss {:.6g}",
                                       result.steps - result.start_step, result.train_seconds,
                                       result.samples_per_sec, result.final_loss);
  if (result.checkpoints_written > 0) {
    // What is there now (keep removed the older ones), not how many were written.
    const std::vector<int64_t> kept = checkpoint_steps(job.checkpoint.dir);
    done += fmt::format(", checkpoint step(s) {} kept in {}", fmt::join(kept, ", "), job.checkpoint.dir);
    if (result.interrupted)
      done += " (resume: --resume latest)";
  } else if (result.interrupted) {
    done += job.checkpoint.dir.empty()
                ? "; nothing saved: the job names no checkpoint.dir (the result JSON holds the variables)"
                : "; no checkpoint: no step ran";
  }
  if (options.out) {
    fmt::print(options.out, "{}\n", done);
    std::fflush(options.out);
  }
  if (options.on_line) options.on_line(done);
  result.summary = std::move(done);
  return result;
}

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
