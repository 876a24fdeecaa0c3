// The checks of a job's graph sections (inputs, variables, ops, loss,
// metrics, fetch) and the entry points; groups and pipeline stages are
// check_layout.cc's. Tensors are defined in file order: inputs,
// variables, then each op's outputs. A tensor whose shape is unknown (its
// producer had an error) is still defined, so one mistake yields one issue.
#include "graph/job_check.h"

#include <algorithm>
#include <exception>
#include <map>
#include <set>

#include "graph/check_util.h"
#include "kernels/op.h"

namespace rill::graph {
namespace {

using check::did_you_mean;
using check::Issues;
using check::label;
using check::name_list;

constexpr size_t kMaxReported = 50;

struct Defined {
  std::string where;                // "inputs[0] (x)"
  std::optional<TensorMeta> meta;   // unset when it could not be inferred
};

// Runs `infer_op`, turning an escaped exception into an error: the checker
// must survive a faulty op as well as a faulty job.
Status safe_infer(const OpDef& def, const Attrs& attrs, std::span<const TensorMeta> inputs,
                  std::vector<TensorMeta>* outputs) {
  try {
    return infer_op(def, attrs, inputs, outputs);
  } catch (const std::exception& e) {
    return internal_error("op '{}' shape inference failed: {}", def.type, e.what());
  }
}

std::vector<std::string> op_types(OpRole role) {
  std::vector<std::string> types;
  for (const OpDef* def : all_ops())
    if (def->role == role) types.push_back(def->type);
  return types;
}

class GraphChecker {
 public:
  GraphChecker(const Job& job, int64_t batch, Issues* issues) : job_(job), batch_(batch), issues_(issues) {}

  void run() {
    check_inputs();
    check_variables();
    check_ops();
    check_loss();
    check_metrics();
    check_fetch();
    check::check_groups(job_, issues_);
    check::check_pipeline(job_, issues_);
    check_eval_collectives();
    check_distributed();
  }

 private:
  // Fluid's transpiler settings (compiler/pserver.h). Whether the nodes
  // named exist is the compiler's check (it knows the cluster).
  void check_distributed() {
    if (!job_.distributed) return;
    const Distributed& d = *job_.distributed;
    if (d.trainers < 0) issues_->add("distributed.trainers", "distributed.trainers must be >= 0, got {}", d.trainers);
    if (d.rpc_deadline <= 0 || d.rpc_deadline > kMaxRpcDeadlineMs)
      issues_->add("distributed.rpc_deadline", "distributed.rpc_deadline must be 1 to {} ms (a week), got {}",
                   kMaxRpcDeadlineMs, d.rpc_deadline);
    for (const auto& [field, value] : {std::pair{"rpc_send_thread_num", d.rpc_send_thread_num},
                                       std::pair{"rpc_get_thread_num", d.rpc_get_thread_num},
                                       std::pair{"rpc_prefetch_thread_num", d.rpc_prefetch_thread_num}})
      if (value < 1 || value > kMaxRpcThreads)
        issues_->add(fmt::format("distributed.{}", field), "distributed.{} must be 1 to {} threads, got {}", field,
                     kMaxRpcThreads, value);
    if (!job_.pserver_mode()) {
      if (!d.pservers.empty())
        issues_->add("distributed.pservers", "distributed.pservers: mode \"{}\" has no pservers (trainers only)",
                     to_string(d.mode));
      return;
    }
    if (d.pservers.empty())
      issues_->add("distributed.pservers", "distributed.pservers: pserver mode needs at least one pserver");
    if (d.min_block_size < 1)
      issues_->add("distributed.min_block_size", "distributed.min_block_size must be >= 1 element, got {}",
                   d.min_block_size);
    if (d.enable_dc_asgd && d.sync_mode)
      issues_->add("distributed.enable_dc_asgd",
                   "distributed.enable_dc_asgd compensates the delay of asynchronous updates; set sync_mode false");
    if (job_.mirrored())
      issues_->add("train.view", "train.view \"mirrored\": pserver mode runs in the consistent view");
    if (job_.pipeline) issues_->add("pipeline", "pipeline: pserver mode places every op itself; remove the pipeline");
    if (!job_.groups.empty())
      issues_->add("groups", "groups: pserver mode places every op itself (trainers) and variable (pservers)");
    if (job_.train.zero) issues_->add("train.zero", "train.zero: pserver mode slices variables itself");
    for (size_t i = 0; i < job_.inputs.size(); ++i)
      if (job_.inputs[i].placement)
        issues_->add(check::label("inputs", i, job_.inputs[i].name),
                     "input '{}': pserver mode places inputs on the trainers; remove its placement",
                     job_.inputs[i].name);
    for (size_t i = 0; i < job_.variables.size(); ++i)
      if (job_.variables[i].placement || job_.variables[i].sbp)
        issues_->add(check::label("variables", i, job_.variables[i].name),
                     "variable '{}': pserver mode places variables itself; remove its placement and sbp",
                     job_.variables[i].name);
    for (size_t i = 0; i < job_.ops.size(); ++i)
      if (job_.ops[i].placement)
        issues_->add(check::label("ops", i, job_.ops[i].name),
                     "op '{}': pserver mode places ops on the trainers; remove its placement", job_.ops[i].name);
  }

  // The eval pass runs in the consistent view, where a tensor is one value:
  // a collective op (the mirrored view's) that the loss or a metric reads
  // cannot run there. (Fetched tensors are train-only.)
  void check_eval_collectives() {
    if (!job_.eval || !job_.mirrored()) return;
    std::set<std::string> needed;
    if (!job_.loss.empty()) needed.insert(job_.loss);
    for (const Metric& m : job_.metrics) needed.insert(m.tensor);
    for (size_t i = job_.ops.size(); i-- > 0;) {
      const Op& op = job_.ops[i];
      bool read = false;
      for (const std::string& out : op.outputs) read = read || needed.count(out) != 0;
      if (!read) continue;
      needed.insert(op.inputs.begin(), op.inputs.end());
      const OpDef* def = find_op(op.type);
      if (def != nullptr && def->role == OpRole::kCollective)
        issues_->add(fmt::format("ops[{}].type", i),
                     "{}: '{}' feeds the loss or a metric, which eval computes in the consistent view (no ranks "
                     "there); report it from a job without an eval section, or fetch it",
                     label("ops", i, op.name), op.type);
    }
  }

  // Records `name` as defined; reports an empty or duplicate name.
  void define(const std::string& name, const std::string& path, const std::string& where,
              std::optional<TensorMeta> meta, const char* what) {
    if (name.empty()) {
      issues_->add(path, "{}: {} has no name", where, what);
      return;
    }
    auto [it, inserted] = tensors_.emplace(name, Defined{where, std::move(meta)});
    if (!inserted) {
      issues_->add(path, "{}: tensor name '{}' is already defined by {}", where, name, it->second.where);
      return;
    }
    order_.push_back(name);
  }

  void check_inputs() {
    for (size_t i = 0; i < job_.inputs.size(); ++i) {
      const Input& in = job_.inputs[i];
      std::string path = fmt::format("inputs[{}]", i), where = label("inputs", i, in.name);
      bool shape_ok = check::sane_shape(in.shape);
      if (!shape_ok)
        issues_->add(path + ".shape", "{}: shape {}: every dim must be in [1, 2^31), at most 8 axes and 2^40 bytes", where,
                     shape_string(in.shape));
      // A wrong field, dtype or shape is this input's issue alone: its
      // consumers are not checked against a meta known to be wrong.
      size_t before = issues_->size();
      check_input_field(in, path, where);
      shape_ok = shape_ok && issues_->size() == before;
      auto batch_or_b = [](const Sbp& s) { return s == Sbp::split(0) || s == Sbp::broadcast(); };
      if (in.sbp && (!batch_or_b(in.sbp->across) || !batch_or_b(in.sbp->within)))
        issues_->add(path + ".sbp", "{}: SBP {} is not supported for inputs (S(0) or B on each axis)", where,
                     in.sbp->to_string());
      const auto rank = static_cast<int64_t>(in.shape.size()) + 1;
      if (in.sequence_axis && (*in.sequence_axis < 1 || *in.sequence_axis >= rank))
        issues_->add(path + ".sequence_axis", "{}: sequence_axis {} is not an axis of a sample of shape {} ({}; "
                     "axis 0 is the batch)", where, *in.sequence_axis, shape_string(in.shape),
                     rank > 1 ? fmt::format("1 to {}", rank - 1) : std::string("a scalar sample has none"));
      std::optional<TensorMeta> meta;
      if (shape_ok) {
        Shape shape = in.shape;
        shape.insert(shape.begin(), batch_);
        if (checked_bytes(shape, in.dtype) >= 0)
          meta = TensorMeta{shape, in.dtype};
        else
          issues_->add(path + ".shape", "{}: a batch of {} samples of shape {} is over the largest tensor of 2^40 bytes",
                       where, batch_, shape_string(in.shape));
      }
      define(in.name, path, where, meta, "the input");
    }
  }

  void check_input_field(const Input& in, const std::string& path, const std::string& where) {
    const Dataset* d = check::find_dataset(job_, in.dataset);
    if (d == nullptr) {
      std::vector<std::string> names = check::dataset_names(job_);
      issues_->add(path + ".dataset", "{}: unknown dataset '{}'{} (known: {})", where, in.dataset,
                   did_you_mean(in.dataset, names), name_list(names));
      return;
    }
    std::vector<check::FieldInfo> fields = check::dataset_fields(*d);
    if (fields.empty()) return;  // unknown kind: reported with the dataset
    std::vector<std::string> names;
    const check::FieldInfo* match = nullptr;
    for (const check::FieldInfo& f : fields) {
      names.push_back(f.name);
      if (f.name == in.field) match = &f;
    }
    if (match == nullptr) {
      issues_->add(path + ".field", "{}: dataset '{}' ({}) has no field '{}'{}; its fields are: {}", where,
                   d->name, d->kind, in.field, did_you_mean(in.field, names), name_list(names));
      return;
    }
    if (match->dtype != in.dtype)
      issues_->add(path + ".dtype", "{}: field '{}' of dataset '{}' is {}, but the input is {}", where, in.field,
                   d->name, dtype_name(match->dtype), dtype_name(in.dtype));
    if (match->shape && *match->shape != in.shape)
      issues_->add(path + ".shape", "{}: shape {} does not match field '{}' of dataset '{}' ({} per sample)", where,
                   shape_string(in.shape), in.field, d->name, shape_string(*match->shape));
    if (!match->shape && in.shape.size() != 1)
      issues_->add(path + ".shape", "{}: field '{}' of dataset '{}' is a flat vector per sample; shape {} must have "
                   "one axis", where, in.field, d->name, shape_string(in.shape));
  }

  void check_variables() {
    for (size_t i = 0; i < job_.variables.size(); ++i) {
      const Variable& v = job_.variables[i];
      std::string path = fmt::format("variables[{}]", i), where = label("variables", i, v.name);
      if (v.name.starts_with(kCarriedStatePrefix))
        issues_->add(path + ".name", "{}: a variable's name may not start with '{}' (checkpoints keep compressed "
                     "gradients' carried state under it)", where, kCarriedStatePrefix);
      bool shape_ok = check::sane_shape(v.shape);
      if (!shape_ok)
        issues_->add(path + ".shape", "{}: shape {}: every dim must be in [1, 2^31), at most 8 axes and 2^40 bytes", where,
                     shape_string(v.shape));
      if (v.dtype == DType::kBF16 || v.dtype == DType::kF16)
        issues_->add(path + ".dtype", "{}: a variable is f32 or i32, not {} (a cast op makes bf16 and f16 values "
                     "from it)", where, dtype_name(v.dtype));
      else if (v.dtype != DType::kF32 && v.trainable)
        issues_->add(path + ".dtype", "{}: an {} variable cannot be trainable (set trainable to false)", where,
                     dtype_name(v.dtype));
      if (v.sequence_axis && (*v.sequence_axis < 0 || *v.sequence_axis >= static_cast<int64_t>(v.shape.size())))
        issues_->add(path + ".sequence_axis", "{}: sequence_axis {} is not an axis of shape {}", where,
                     *v.sequence_axis, shape_string(v.shape));
      if (v.sbp && v.sbp->has(Sbp::kPartialSum))
        issues_->add(path + ".sbp", "{}: SBP {} is not allowed for a variable: it holds values, not partial sums "
                     "(S(axis) or B on each axis)", where, v.sbp->to_string());
      else if (v.sbp)
        check_hint(*v.sbp, TensorMeta{v.shape, v.dtype}, path, where);
      if (shape_ok) check_initializer(v, path + ".init", where);
      define(v.name, path, where, shape_ok ? std::optional<TensorMeta>(TensorMeta{v.shape, v.dtype}) : std::nullopt,
             "the variable");
    }
  }

  void check_initializer(const Variable& v, const std::string& path, const std::string& where) {
    const OpDef* def = find_op(v.init.type);
    std::vector<std::string> known = op_types(OpRole::kInitializer);
    if (def == nullptr || def->role != OpRole::kInitializer) {
      issues_->add(path + ".type", "{}: unknown initializer '{}'{} (known: {})", where, v.init.type,
                   did_you_mean(v.init.type, known), name_list(known));
      return;
    }
    Attrs attrs = v.init.attrs;
    if (attrs.has("shape")) {
      auto* given = std::get_if<std::vector<int64_t>>(&attrs.values().at("shape"));
      if (given == nullptr || *given != v.shape) {
        issues_->add(path + ".shape", "{}: init shape {} does not match the variable's shape {}", where,
                     given ? shape_string(*given) : "(not a list)", shape_string(v.shape));
        return;
      }
    }
    attrs.set("shape", std::vector<int64_t>(v.shape));
    if (!attrs.has("dtype")) attrs.set("dtype", std::string(dtype_name(v.dtype)));
    std::vector<TensorMeta> outputs;
    Status s = safe_infer(*def, attrs, {}, &outputs);
    if (!s.ok()) {
      issues_->add(path, "{}: init: {}", where, s.message());
    } else if (outputs.empty() || outputs[0].shape != v.shape || outputs[0].dtype != v.dtype) {
      issues_->add(path, "{}: initializer '{}' makes {} {}, but the variable is {} {}", where, v.init.type,
                   outputs.empty() ? "?" : dtype_name(outputs[0].dtype),
                   outputs.empty() ? "[]" : shape_string(outputs[0].shape), dtype_name(v.dtype),
                   shape_string(v.shape));
    }
  }

  void check_ops() {
    std::map<std::string, size_t> producer;  // for "listed later" messages
    for (size_t i = 0; i < job_.ops.size(); ++i)
      for (const std::string& out : job_.ops[i].outputs) producer.emplace(out, i);
    std::set<std::string> op_names;
    for (size_t i = 0; i < job_.ops.size(); ++i) {
      const Op& op = job_.ops[i];
      std::string path = fmt::format("ops[{}]", i), where = label("ops", i, op.name);
      if (op.name.empty()) issues_->add(path, "{}: the op has no name", where);
      else if (!op_names.insert(op.name).second)
        issues_->add(path + ".name", "{}: op name '{}' is used twice", where, op.name);
      const OpDef* def = check_op_type(op, path, where);
      bool inputs_known = true;
      std::vector<TensorMeta> metas;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        const std::string& name = op.inputs[k];
        auto it = tensors_.find(name);
        if (it != tensors_.end()) {
          if (it->second.meta) metas.push_back(*it->second.meta);
          else inputs_known = false;
          continue;
        }
        inputs_known = false;
        auto later = producer.find(name);
        if (later != producer.end() && later->second >= i) {
          issues_->add(path + ".inputs", "{}: input '{}' is produced by {}, which is not listed before it "
                       "(ops run in the order written)", where, name,
                       label("ops", later->second, job_.ops[later->second].name));
        } else {
          issues_->add(path + ".inputs", "{}: input '{}' is not defined{} (known: {})", where, name,
                       did_you_mean(name, order_), name_list(order_));
        }
      }
      std::vector<TensorMeta> outputs;
      if (def != nullptr && inputs_known && arity_ok(*def, op)) {
        Status s = safe_infer(*def, op.attrs, metas, &outputs);
        if (!s.ok()) {
          issues_->add(path, "{}: {}", where, s.message());
          outputs.clear();
        }
        // A gather's or scatter's shape depends on the ranks, known when compiled.
        if (def->role == OpRole::kCollective && op.type != "all_reduce") outputs.clear();
      }
      if (op.outputs.empty()) issues_->add(path + ".outputs", "{}: the op has no outputs", where);
      if (op.output_sbp.size() > op.outputs.size())
        issues_->add(path + ".sbp", "{}: {} output SBP hints for {} outputs", where, op.output_sbp.size(),
                     op.outputs.size());
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        std::optional<TensorMeta> meta;
        if (k < outputs.size()) meta = outputs[k];
        if (k < op.output_sbp.size() && op.output_sbp[k] && meta) check_hint(*op.output_sbp[k], *meta, path, where);
        define(op.outputs[k], path + ".outputs", where, meta, "an output");
      }
    }
  }

  // The op's definition, or nullptr after reporting why it cannot be used.
  const OpDef* check_op_type(const Op& op, const std::string& path, const std::string& where) {
    const OpDef* def = find_op(op.type);
    if (def == nullptr) {
      issues_->add(path + ".type", "{}: unknown op type '{}'{}", where, op.type,
                   did_you_mean(op.type, op_types(OpRole::kCompute)));
      return nullptr;
    }
    if (def->role == OpRole::kInitializer) {
      issues_->add(path + ".type", "{}: '{}' is an initializer; use it as a variable's init, not as an op", where,
                   op.type);
      return nullptr;
    }
    if (def->role == OpRole::kUpdate) {
      issues_->add(path + ".type", "{}: '{}' is an optimizer update; the optimizer section adds these", where,
                   op.type);
      return nullptr;
    }
    if (def->role == OpRole::kCollective) {
      if (!job_.mirrored()) {
        issues_->add(path + ".type",
                     "{}: '{}' is a collective of the mirrored view (train.view \"mirrored\"), where each device "
                     "holds its own value; in the consistent view a tensor is one value, and SBP hints say how its "
                     "parts are laid out",
                     where, op.type);
        return nullptr;
      }
      for (const char* attr : {"ranks", "scale"})
        if (op.attrs.has(attr))
          issues_->add(path + ".attrs." + attr, "{}: attr '{}' of '{}' is the compiler's (the job's devices)", where,
                       attr, op.type);
    }
    int n = static_cast<int>(op.inputs.size());
    if (def->num_inputs >= 0 && n != def->num_inputs)
      issues_->add(path + ".inputs", "{}: '{}' takes {} input(s), got {}", where, op.type, def->num_inputs, n);
    if (def->num_inputs < 0 && n < 1)
      issues_->add(path + ".inputs", "{}: '{}' takes at least one input", where, op.type);
    if (!op.outputs.empty() && static_cast<int>(op.outputs.size()) != def->num_outputs)
      issues_->add(path + ".outputs", "{}: '{}' has {} output(s), {} named", where, op.type, def->num_outputs,
                   op.outputs.size());
    return def;
  }

  static bool arity_ok(const OpDef& def, const Op& op) {
    int n = static_cast<int>(op.inputs.size());
    return def.num_inputs >= 0 ? n == def.num_inputs : n >= 1;
  }

  void check_hint(const NdSbp& hint, const TensorMeta& meta, const std::string& path, const std::string& where) {
    for (const Sbp& s : {hint.across, hint.within})
      if (s.kind == Sbp::kSplit && (s.axis < 0 || s.axis >= static_cast<int>(meta.shape.size()))) {
        issues_->add(path + ".sbp", "{}: SBP {} splits an axis the tensor {} lacks", where, hint.to_string(),
                     shape_string(meta.shape));
        return;
      }
  }

  // The tensor `name` for the loss or a metric, or nullptr after reporting.
  const Defined* find_reported(const std::string& name, const std::string& path, const std::string& where) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      issues_->add(path, "{}: tensor '{}' is not defined{} (known: {})", where, name, did_you_mean(name, order_),
                   name_list(order_));
      return nullptr;
    }
    const Defined& d = it->second;
    if (d.meta && num_elements(d.meta->shape) != 1)
      issues_->add(path, "{}: tensor '{}' has shape {}, expected a scalar (reduce it, e.g. with reduce_mean)", where,
                   name, shape_string(d.meta->shape));
    return &d;
  }

  void check_loss() {
    if (job_.loss.empty()) {
      issues_->add("loss", "loss: the job has no loss (name the scalar tensor to minimize)");
      return;
    }
    const Defined* d = find_reported(job_.loss, "loss", "loss");
    if (d != nullptr && d->meta && d->meta->dtype != DType::kF32)
      issues_->add("loss", "loss: tensor '{}' is {}, expected f32", job_.loss, dtype_name(d->meta->dtype));
  }

  void check_metrics() {
    std::set<std::string> names{"loss"}, tensors{job_.loss};
    for (size_t i = 0; i < job_.metrics.size(); ++i) {
      const Metric& m = job_.metrics[i];
      std::string path = fmt::format("metrics[{}]", i), where = label("metrics", i, m.name);
      if (m.name.empty()) issues_->add(path, "{}: the metric has no name", where);
      else if (!names.insert(m.name).second)
        issues_->add(path + ".name", "{}: the name '{}' is already reported{}", where, m.name,
                     m.name == "loss" ? " (it is reserved for the loss)" : "");
      if (find_reported(m.tensor, path + ".tensor", where) != nullptr && !tensors.insert(m.tensor).second)
        issues_->add(path + ".tensor", "{}: tensor '{}' is already reported{}", where, m.tensor,
                     m.tensor == job_.loss ? " as the loss" : "");
    }
  }

  void check_fetch() {
    std::set<std::string> seen;
    for (size_t i = 0; i < job_.fetch.size(); ++i) {
      const std::string& name = job_.fetch[i];
      const std::string path = fmt::format("fetch[{}]", i);
      if (tensors_.count(name) == 0)
        issues_->add(path, "{}: tensor '{}' is not defined{} (known: {})", path, name, did_you_mean(name, order_),
                     name_list(order_));
      else if (!seen.insert(name).second)
        issues_->add(path, "{}: tensor '{}' is fetched twice", path, name);
    }
  }
  const Job& job_;
  int64_t batch_;
  Issues* issues_;
  std::map<std::string, Defined> tensors_;
  std::vector<std::string> order_;  // defined tensor names, in order
};

// The batch used for shape inference: `batch` if usable, else 1 (a bad batch
// size is reported by the train or eval checks, not as shape errors).
int64_t inference_batch(int64_t batch) { return batch >= 1 && batch < (int64_t{1} << 31) ? batch : 1; }

}  // namespace

std::vector<JobIssue> find_job_issues(const Job& job) {
  Issues issues;
  if (job.name.empty()) issues.add("name", "name: the job has no name");
  check::check_datasets(job, &issues);
  int64_t train_batch = inference_batch(job.train.batch_size);
  GraphChecker(job, train_batch, &issues).run();
  // Shapes can depend on the batch (a reshape that spells it out): check the
  // eval batch too, once the graph is otherwise sound.
  if (issues.size() == 0 && job.eval && inference_batch(job.eval->batch_size) != train_batch) {
    Issues eval_issues;
    GraphChecker(job, inference_batch(job.eval->batch_size), &eval_issues).run();
    for (JobIssue& issue : eval_issues.take())
      issues.add(std::move(issue.path), "with eval.batch_size {}: {}", job.eval->batch_size, issue.message);
  }
  check::check_run_config(job, &issues);
  return issues.take();
}

Status check_job(const Job& job) {
  std::vector<JobIssue> issues = find_job_issues(job);
  if (issues.empty()) return {};
  std::string message;
  for (size_t i = 0; i < issues.size() && i < kMaxReported; ++i) {
    if (i > 0) message += "\n";
    message += issues[i].message;
  }
  if (issues.size() > kMaxReported) message += fmt::format("\n... and {} more", issues.size() - kMaxReported);
  return Status(Code::kInvalidArgument, message);
}

}  // namespace rill::graph
