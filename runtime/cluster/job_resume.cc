#include "runtime/cluster/job_resume.h"

#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/gradient_norm.h"
#include "compiler/optimizer.h"
#include "kernels/op.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/node/carried_state.h"

namespace rill {

// Loads a checkpoint into the run: variables (each checked against the
// job's shape), optimizer state, first step; says where it resumes on `out`.
Status resume_from(const graph::Job& job, const std::string& where, JobResult& result, RunOptions& run,
                   std::FILE* out, const FileAccess& access) {
  std::string path = where;
  if (where == "latest") {
    if (job.checkpoint.dir.empty())
      return invalid_argument("--resume latest: the job names no checkpoint.dir to look in");
    path = job.checkpoint.dir;
  }
  RILL_ASSIGN_OR_RETURN(Checkpoint checkpoint, read_checkpoint(path, access));
  int rounded = 0;  // variables stored in 16 bits
  std::map<std::string, const graph::Variable*> variables;
  for (const graph::Variable& v : job.variables) variables[v.name] = &v;
  // Loss scaling's state, when the job scales (compiler/gradient_norm.h):
  // restored where the checkpoint has it, else it starts afresh (a job
  // resumed in f16 from an f32 checkpoint).
  const std::optional<graph::Variable> scale_state = compiler::loss_scale_variable(job.train);
  if (scale_state) variables[scale_state->name] = &*scale_state;
  int carried = 0, carried_unused = 0;  // tensors of the compressed all-reduces' carried state
  for (CheckpointTensor& t : checkpoint.tensors) {
    size_t slash = t.name.rfind('/');
    // Each boxing restores its own, if it is of its size (runtime/node/carried_state.h).
    if (t.name.starts_with(kCarriedPrefix)) {
      if (carried_of(t.name, job.train.compression)) {
        ++carried;
        run.carried_checkpoint[t.name] = {t.shape, std::move(t.values)};
      } else {
        ++carried_unused;
      }
      continue;
    }
    if (auto it = variables.find(t.name); it != variables.end()) {
      if (t.shape != it->second->shape)
        return invalid_argument("checkpoint {}: variable '{}' is {} there; the job declares {}", path, t.name,
                                shape_string(t.shape), shape_string(it->second->shape));
      // A 16-bit tensor (checkpoint.dtype) resumes an f32 variable, widened
      // exactly: training goes on from the rounded values.
      if (is_float(t.dtype) != is_float(it->second->dtype))
        return invalid_argument("checkpoint {}: variable '{}' is {} there; the job declares {}", path, t.name,
                                dtype_name(t.dtype), dtype_name(it->second->dtype));
      if (t.dtype != it->second->dtype) ++rounded;
      run.initial_values[t.name] = std::move(t.values);
    }
    else if (slash != std::string::npos && variables.count(t.name.substr(0, slash)))
      run.initial_state[t.name] = std::move(t.values);
  }
  for (const auto& [v, declared] : variables)
    if (!run.initial_values.count(v) && !(scale_state && v == scale_state->name))
      return invalid_argument("checkpoint {} has no tensor for variable '{}'", path, v);
  if (checkpoint.step >= result.steps)
    return invalid_argument("checkpoint {} is at step {}: the job runs {} steps, nothing is left to run", path,
                            checkpoint.step, result.steps);
  run.start_step = checkpoint.step;
  result.start_step = checkpoint.step;
  // Optimizer state the job's update reads that the checkpoint lacks starts
  // from zero (a checkpoint of another optimizer: sgd's into adam), and
  // state it holds that nothing reads is left: both said.
  std::set<std::string> wanted;
  const char* update_op = compiler::update_op_of(job.optimizer.type);
  if (const OpDef* update = update_op ? find_op(update_op) : nullptr)
    for (const graph::Variable& v : job.variables)
      for (int i = 0; v.trainable && i < update->num_state; ++i)
        if (update->state_names[i]) wanted.insert(v.name + "/" + update->state_names[i]);
  std::set<std::string> fresh = wanted, unused;
  for (const auto& [name, values] : run.initial_state)
    if (!fresh.erase(name)) unused.insert(name.substr(name.rfind('/') + 1));
  std::set<std::string> fresh_kinds;
  for (const std::string& name : fresh) fresh_kinds.insert(name.substr(name.rfind('/') + 1));
  if (out) {
    // The step folder read: under a root, or the path itself.
    const std::string step_dir = path + "/" + checkpoint_step_name(checkpoint.step);
    std::error_code ec;
    const std::string from = std::filesystem::is_directory(step_dir, ec) ? step_dir : path;
    fmt::print(out,
               "resuming at step {} from {} ({} variable(s){}; a checkpoint holds whole tensors, so any layout "
               "resumes it)\n",
               checkpoint.step, from, run.initial_values.size(),
               rounded > 0 ? fmt::format(", {} of them stored in 16 bits and widened", rounded) : "");
    if (carried > 0)
      fmt::print(out, "the compressed gradients' carried error goes on from the checkpoint ({} tensor(s))\n",
                 carried);
    if (carried_unused > 0)
      fmt::print(out, "note: the checkpoint's carried error of compressed gradients ({} tensor(s)) is left unused: "
                      "it is not of the job's train.compression \"{}\"\n",
                 carried_unused,
                 graph::ModeWords<graph::Compression>::words[static_cast<size_t>(job.train.compression)]);
    if (!fresh.empty())
      fmt::print(out, "note: the checkpoint holds no {} for {} of {} optimizer state tensor(s) of '{}': they start "
                      "from zero\n",
                 fmt::join(fresh_kinds, ", "), fresh.size(), wanted.size(), job.optimizer.type);
    if (!unused.empty())
      fmt::print(out, "note: the checkpoint's {} state is not read by '{}': left unused\n", fmt::join(unused, ", "),
                 job.optimizer.type);
    std::fflush(out);
  }
  return {};
}

}  // namespace rill
