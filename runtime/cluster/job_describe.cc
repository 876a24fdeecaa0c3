#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/gradient_norm.h"
#include "compiler/pserver.h"
#include "runtime/cluster/job_phases.h"

namespace rill {

void JobRun::say(const std::string& line) const {
  if (options.out) fmt::print(options.out, "{}\n", line);
  if (options.on_line) options.on_line(line);
}

void describe_run(const JobRun& run, const plan::Plan& p) {
  if (!run.speaks()) return;
  const graph::Job& job = run.job;
  // Devices other than the job's own are named with who chose them.
  const std::string chosen = run.devices == job.train.devices
                                 ? std::string()
                                 : fmt::format(", devices from {}; the job's train.devices is {}",
                                               run.options.devices_from, job.train.devices);
  run.say(fmt::format("job '{}': {} steps of global batch {} on {} node(s) x {} ({} tasks{})", job.name,
                          run.result.steps, run.result.global_batch, run.options.num_nodes, run.devices, p.num_tasks(),
                          chosen));
  // How the step is cut, where it is (stages, micro-batches, schedule).
  if (p.micro_batches() > 1 || p.stages() > 1)
    run.say(fmt::format("{} stage(s), {} micro-batch(es) of {} rows per step, schedule {}", p.stages(),
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
    run.say(fmt::format("mixed precision: matmuls multiply {} copies of their inputs ({} casts{}); weights, optimizer "
                        "state and every other op stay f32{}",
                        graph::to_string(job.train.precision), casts.size(), run.options.num_nodes > 1 ? " on node 0" : "",
                        run.cluster.device_type == DeviceType::kCpu
                            ? " (on cpu devices a 16-bit matmul widens its inputs and multiplies in f32: the 16-bit "
                              "values, not the speed)"
                            : ""));
  }
  if (compiler::loss_scale_variable(job.train))
    run.say(fmt::format("loss scaling: from {:g}, halved on an overflow (the step skipped), doubled after {} good steps",
                        compiler::first_loss_scale(job.train), job.train.loss_scale_window));
  // Parameter servers: who holds the blocks, who trains (the blocks
  // themselves: rill plan, or the master's log with print_log).
  if (job.pserver_mode())
    if (auto layout = compiler::pserver_layout(job, run.cluster); layout.ok()) {
      const std::string described = compiler::describe_pserver_layout(*layout, job);
      run.say(fmt::format("{}; {} block(s)", described.substr(0, described.find('\n')), layout->blocks.size()));
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
  if (!files.empty()) run.say(fmt::format("reading dataset(s) {}", fmt::join(files, ", ")));
  // Out before anything that may fail on stderr: piped, stdout is buffered
  // and the error would come first.
  if (run.options.out) std::fflush(run.options.out);
}

}  // namespace rill
