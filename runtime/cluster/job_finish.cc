// The last phase of a job's run (job_phases.h): the eval pass from the
// trained variables, text sampled from them, a small model's learned values
// and the fetched tensors, and the last line ("done: ...").
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/printable.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cluster/job_phases.h"
#include "runtime/eager/generate.h"

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

}  // namespace

Status evaluate(JobRun& run) {
  const graph::Job& job = run.job;
  const JobRunOptions& options = run.options;
  JobResult& result = run.result;
  if (!job.eval || run.stopped()) return {};
  compiler::CompileOptions eval_options;
  eval_options.mode = compiler::Mode::kEval;
  eval_options.data_access = options.data_access;
  if (options.num_nodes > 1) eval_options.node = 0;
  auto eval_plan = compiler::compile(job, run.cluster, eval_options);
  if (!eval_plan.ok()) return eval_plan.status().with_context("eval");
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
  if (!eval_verified.ok()) return eval_verified.status().with_context("eval");
  eval_options.steps = (*eval_verified)->steps();
  const int64_t eval_batch = (*eval_verified)->global_batch();
  RunReport eval = run.execute(PhasePlan{std::move(*eval_plan), run.devices, eval_options}, eval_run);
  if (!eval.status.ok()) return eval.status.with_context("eval");
  result.eval_samples = eval_steps * eval_batch;
  for (const auto& [name, sum] : sums) result.eval_metrics[name] = eval_steps ? sum / eval_steps : 0.0;
  // Stopped while it ran: the metrics are over the samples it saw.
  const bool cut = eval.steps < eval_options.steps;
  result.interrupted = result.interrupted || cut;
  std::string line = cut ? fmt::format("eval on '{}' (interrupted: {} of {} samples):", job.eval->dataset,
                                       result.eval_samples, eval_options.steps * eval_batch)
                         : fmt::format("eval on '{}' ({} samples):", job.eval->dataset, result.eval_samples);
  for (const auto& [name, value] : result.eval_metrics) line += fmt::format("  {} {:.4f}", name, value);
  run.say(line);
  return {};
}

Status generate(JobRun& run) {
  const graph::Job& job = run.job;
  JobResult& result = run.result;
  if (!job.generate || run.stopped()) return {};
  // Text from the trained model, sampled on the master from its variables.
  eager::Tensors variables;
  Status read;
  for (const graph::Variable& v : job.variables)
    if (auto value = result.variables.find(v.name); value != result.variables.end() && read.ok()) {
      auto t = eager::HostTensor::variable(v.name, TensorMeta{value->second.shape, v.dtype}, value->second.values);
      if (t.ok()) variables[v.name] = std::move(*t);
      read = t.status();
    }
  auto text = read.ok() ? eager::generate_text(job, variables, *job.generate, run.options.data_access)
                        : StatusOr<std::string>(read);
  if (!text.ok()) return text.status().with_context("generate");
  result.generated = *text;
  // Printed with control bytes and non-UTF-8 escaped (the result keeps the bytes).
  const std::string line =
      fmt::format("generated ({} {} after the prompt):\n{}", job.generate->tokens,
                  job.generate->tokenizer == "gpt2" ? "GPT-2 tokens" : "bytes", printable(*text));
  run.say(line);
  return {};
}

void report(JobRun& run) {
  const graph::Job& job = run.job;
  const JobRunOptions& options = run.options;
  JobResult& result = run.result;
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
  for (const std::string& line : fetched_lines(shown)) run.say(line);
  std::string done = result.interrupted
                         ? fmt::format("interrupted at step {} of {}: {} steps in {:.2f} s, {:.0f} samples/s, final "
                                       "loss {:.6g}",
                                       result.steps, result.planned_steps, result.steps - result.start_step,
                                       result.train_seconds, result.samples_per_sec, result.final_loss)
                         : fmt::format("done: {} steps in {:.2f} s, {:.0f} samples/s, final loss {:.6g}",
                                       result.steps - result.start_step, result.train_seconds,
                                       result.samples_per_sec, result.final_loss);
  if (options.start_from_memory >= 0 && result.start_step == result.steps && !result.interrupted)
    // An attempt after the training (a node lost in the eval): its figures
    // are the earlier attempt's, joined by the master.
    done = fmt::format("done: {} steps, trained before a node was lost; the model from node 0's memory",
                       result.steps);
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
}

}  // namespace rill
