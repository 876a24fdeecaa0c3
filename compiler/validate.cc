#include "compiler/validate.h"

#include <algorithm>
#include <set>

#include "base/fnv1a.h"
#include "compiler/autocast.h"
#include "graph/job_check.h"

namespace rill::compiler {
namespace {

// FNV-1a of a name, as a non-negative seed: the same on every machine.
int64_t name_seed(std::string_view name) {
  return static_cast<int64_t>(fnv1a(name) >> 2);
}

Status check_cluster(const Cluster& cluster) {
  if (cluster.num_nodes < 1 || cluster.num_nodes >= (1 << ActorId::kNodeBits))
    return invalid_argument("cluster: {} nodes, expected 1 to {}", cluster.num_nodes, (1 << ActorId::kNodeBits) - 1);
  if (cluster.devices_per_node < 1 || cluster.devices_per_node >= (1 << ActorId::kDeviceBits))
    return invalid_argument("cluster: {} devices per node, expected 1 to {}", cluster.devices_per_node,
                            (1 << ActorId::kDeviceBits) - 1);
  return {};
}

bool is_scalar(const TensorMeta& meta) { return num_elements(meta.shape) == 1; }

Status check_shape(const Shape& shape, const std::string& what) {
  for (int64_t d : shape)
    if (d < 1) return invalid_argument("{}: shape {} has a dim below 1", what, shape_string(shape));
  return {};
}

// The placement of an input, variable or op: its own, else its group's, else
// the job's devices (index 0). Checked against the cluster.
StatusOr<int> resolve_placement(const graph::Job& job, const std::string& name,
                                const std::optional<graph::Placement>& own, const std::string& what,
                                LogicalGraph* g) {
  const graph::Placement* p = own ? &*own : nullptr;
  std::string source = what;
  for (const graph::Group& group : job.groups)
    if (p == nullptr && std::find(group.members.begin(), group.members.end(), name) != group.members.end()) {
      p = &group.placement;
      source = fmt::format("{} (group '{}')", what, group.name);
    }
  if (p == nullptr) return 0;
  const Cluster& c = g->cluster;
  graph::Placement typed;  // written without a type or with `*` devices: the job's devices
  if (p->any_type || p->all_devices) {
    typed = *p;
    if (typed.any_type) typed.type = c.device_type;
    if (typed.all_devices)
      for (int d = 0; d < c.devices_per_node; ++d) typed.devices.push_back(d);
    typed.any_type = typed.all_devices = false;
    p = &typed;
  }
  if (p->nodes.empty() || p->devices.empty())  // a default-constructed graph::Placement from C++
    return invalid_argument("{}: the placement names no devices", source);
  if (p->type != c.device_type)
    return invalid_argument("{}: placement '{}' is on {} devices, but the job runs on {}:{}", source, p->to_string(),
                            device_type_name(p->type), device_type_name(c.device_type), c.devices_per_node);
  if (p->nodes.back() >= c.num_nodes)
    return Status(Code::kFailedPrecondition,  // the cluster is too small for the layout (rill check: a note)
                  fmt::format("{}: placement '{}' names node {}, but the cluster has {} node(s) (0 to {})", source,
                              p->to_string(), p->nodes.back(), c.num_nodes, c.num_nodes - 1));
  if (p->devices.back() >= c.devices_per_node)
    return invalid_argument("{}: placement '{}' names device {}, but each node runs {}:{} (devices 0 to {})", source,
                            p->to_string(), p->devices.back(), device_type_name(c.device_type), c.devices_per_node,
                            c.devices_per_node - 1);
  // The whole cluster is the default placement, written or not.
  graph::Placement whole = graph::whole_cluster(c.device_type, c.num_nodes, c.devices_per_node);
  if (p->same_devices(whole) && !p->two_d) return 0;
  return g->place(*p);
}

// `sbp` over placement `p`, canonical for its shape; a 2-D SBP needs a 2-D
// placement (the job's devices count as one when any hint is 2-D).
StatusOr<NdSbp> place_sbp(const NdSbp& sbp, int p, const std::string& what, const LogicalGraph& g) {
  const graph::Placement& placement = g.placement(p);
  const NdSbp out = canonical(sbp, placement.num_nodes(), placement.per_node());
  if (p != 0 && !out.flat() && !placement.two_d)
    return invalid_argument("{}: SBP {} is 2-D, but placement '{}' is 1-D; write it with its hierarchy, e.g. "
                            "'{} [{},{}] ...'",
                            what, sbp.to_string(), placement.to_string(), device_type_name(placement.type),
                            placement.num_nodes(), placement.per_node());
  return out;
}

Status add_inputs(const graph::Job& job, Mode mode, LogicalGraph* g, std::set<std::string>* names) {
  std::set<std::string> dataset_names;
  for (const graph::Dataset& d : job.datasets) {
    if (d.name.empty()) return invalid_argument("a dataset has no name");
    if (!dataset_names.insert(d.name).second) return invalid_argument("dataset name '{}' is used twice", d.name);
  }
  if (mode == Mode::kEval && dataset_names.count(job.eval->dataset) == 0)
    return not_found("eval: unknown dataset '{}'", job.eval->dataset);
  for (size_t i = 0; i < job.inputs.size(); ++i) {
    const graph::Input& in = job.inputs[i];
    std::string what = fmt::format("input '{}'", in.name);
    if (in.name.empty()) return invalid_argument("inputs[{}] has no name", i);
    if (!names->insert(in.name).second) return invalid_argument("{}: tensor name is used twice", what);
    if (dataset_names.count(in.dataset) == 0) return not_found("{}: unknown dataset '{}'", what, in.dataset);
    if (in.field.empty()) return invalid_argument("{}: no dataset field given", what);
    RILL_RETURN_IF_ERROR(check_shape(in.shape, what));
    InputNode node{in, mode == Mode::kEval ? job.eval->dataset : in.dataset, Sbp::split(0)};
    RILL_ASSIGN_OR_RETURN(node.placement, resolve_placement(job, in.name, in.placement, what, g));
    if (in.sbp) {
      auto batch_or_b = [](const Sbp& s) { return s == Sbp::split(0) || s == Sbp::broadcast(); };
      if (!batch_or_b(in.sbp->across) || !batch_or_b(in.sbp->within))
        return invalid_argument("{}: SBP {} is not supported for inputs (S(0) or B on each axis)", what,
                                in.sbp->to_string());
      RILL_ASSIGN_OR_RETURN(node.sbp, place_sbp(*in.sbp, node.placement, what, *g));
      g->two_d = g->two_d || !node.sbp.flat();
    }
    const int parts = g->placement(node.placement).parallel();
    if (node.sbp.has(Sbp::kSplit) && g->micro_batch() < parts)
      return invalid_argument("{}: the {} of {} is smaller than the {} devices it is split over", what,
                              g->micro_batches > 1 ? "micro-batch" : "batch", g->micro_batch(), parts);
    Shape shape = in.shape;
    shape.insert(shape.begin(), g->micro_batch());
    g->tensors[in.name] = LogicalTensor{
        in.name, TensorMeta{shape, in.dtype}, TensorOrigin::kInput, static_cast<int>(i), 0, node.sbp, node.placement};
    g->inputs.push_back(std::move(node));
  }
  for (const graph::Dataset& d : job.datasets) {
    bool used = false;
    for (const InputNode& in : g->inputs) used = used || in.dataset == d.name;
    if (used) g->datasets.push_back(d);
  }
  return {};
}

Status add_variables(const graph::Job& job, LogicalGraph* g, std::set<std::string>* names) {
  for (size_t i = 0; i < job.variables.size(); ++i) {
    const graph::Variable& v = job.variables[i];
    std::string what = fmt::format("variable '{}'", v.name);
    if (v.name.empty()) return invalid_argument("variables[{}] has no name", i);
    if (!names->insert(v.name).second) return invalid_argument("{}: tensor name is used twice", what);
    RILL_RETURN_IF_ERROR(check_shape(v.shape, what));
    const OpDef* init = find_op(v.init.type);
    if (init == nullptr || init->role != OpRole::kInitializer)
      return not_found("{}: unknown initializer '{}'", what, v.init.type);
    VariableNode node{v, Sbp::broadcast(), "", "", {}, 0, -1};
    RILL_ASSIGN_OR_RETURN(node.placement, resolve_placement(job, v.name, v.placement, what, g));
    const graph::Placement& placement = g->placement(node.placement);
    if (v.sbp) {
      if (v.sbp->has(Sbp::kPartialSum))
        return invalid_argument("{}: SBP {} is not allowed for a variable: it holds values, not partial sums", what,
                                v.sbp->to_string());
      for (const Sbp& s : {v.sbp->across, v.sbp->within})
        if (s.kind == Sbp::kSplit && (s.axis < 0 || s.axis >= static_cast<int>(v.shape.size())))
          return invalid_argument("{}: {} splits an axis a {}-d variable lacks", what, v.sbp->to_string(),
                                  v.shape.size());
      RILL_ASSIGN_OR_RETURN(node.sbp, place_sbp(*v.sbp, node.placement, what, *g));
      g->two_d = g->two_d || !node.sbp.flat();
    } else if (job.train.zero && v.trainable && !v.shape.empty() && v.shape[0] >= placement.parallel()) {
      // ZeRO: each device keeps and updates its rows (and their optimizer
      // state); the gradient arrives reduce-scattered, the forward gathers.
      node.sbp = Sbp::split(0);
    }
    g->tensors[v.name] = LogicalTensor{v.name,    TensorMeta{v.shape, v.dtype}, TensorOrigin::kVariable,
                                       static_cast<int>(i), 0, node.sbp, node.placement};
    g->variables.push_back(std::move(node));
  }
  return {};
}

Status add_reported(const graph::Job& job, Mode mode, LogicalGraph* g) {
  std::set<std::string> tensors, names;
  auto report = [&](const std::string& what, const std::string& name, const std::string& tensor) -> Status {
    const LogicalTensor* t = g->find(tensor);
    if (t == nullptr) return not_found("{}: unknown tensor '{}'", what, tensor);
    if (!is_scalar(t->meta))
      return invalid_argument("{}: tensor '{}' has shape {}, expected a scalar", what, tensor, shape_string(t->meta.shape));
    if (!names.insert(name).second) return invalid_argument("{}: the name '{}' is reported twice", what, name);
    if (!tensors.insert(tensor).second) return invalid_argument("{}: tensor '{}' is already reported", what, tensor);
    g->reported.push_back({name, tensor});
    return {};
  };
  if (mode == Mode::kTrain && job.loss.empty()) return invalid_argument("job has no loss to train");
  if (!job.loss.empty()) {
    RILL_RETURN_IF_ERROR(report("loss", "loss", job.loss));
    if (g->find(job.loss)->meta.dtype != DType::kF32) return invalid_argument("loss: tensor '{}' is not f32", job.loss);
    g->loss = job.loss;
  }
  for (size_t i = 0; i < job.metrics.size(); ++i) {
    const graph::Metric& m = job.metrics[i];
    if (m.name.empty()) return invalid_argument("metrics[{}] has no name", i);
    RILL_RETURN_IF_ERROR(report(fmt::format("metric '{}'", m.name), m.name, m.tensor));
  }
  return {};
}

// The mirrored view: a rank's own inputs (its batch_size rows) and variables.
void set_local_leaves(LogicalGraph* g) {
  const int64_t ranks = g->placement(0).parallel();
  for (auto& [name, t] : g->tensors) {
    t.local = t.meta;
    if (t.origin == TensorOrigin::kInput && !t.local->shape.empty()) t.local->shape[0] /= ranks;
  }
}

// Appends forward op `node`. In the mirrored view it also infers what each
// rank holds from what it reads (tasks run on their pieces as wholes); a
// collective op's shapes come from those: a rank's all_reduce has its
// input's, an all_gather is the same on every rank (B), a reduce_scatter's
// blocks are S(0) pieces of the rank-local sum.
Status append_forward_op(OpNode node, LogicalGraph* g) {
  const std::string what = fmt::format("op '{}' ({})", node.name, node.type);
  const OpDef* def = find_op(node.type);
  const bool collective = def != nullptr && def->role == OpRole::kCollective;
  if (collective && !g->mirrored)
    return invalid_argument(
        "{}: collectives are ops of the mirrored view (train.view \"mirrored\"){}", what,
        g->mode == Mode::kEval ? "; eval plans run in the consistent view (a per-rank eval is not there yet)" : "");
  if (!g->mirrored) return g->append_op(std::move(node));
  std::optional<std::vector<TensorMeta>> local_ins(std::in_place);
  for (const std::string& in : node.inputs) {
    const LogicalTensor* t = g->find(in);
    if (t == nullptr || !t->local) {
      local_ins.reset();
      break;
    }
    local_ins->push_back(*t->local);
  }
  std::vector<TensorMeta> local_outs;
  if (collective) {
    for (const char* attr : {"ranks", "scale"})
      if (node.attrs.has(attr)) return invalid_argument("{}: attr '{}' is the compiler's (the job's devices)", what, attr);
    const int64_t ranks = g->placement(0).parallel();
    node.attrs.set("ranks", ranks);
    node.attrs.set("scale", node.attrs.get_string("reduce", "sum") == "mean" ? 1.0 / static_cast<double>(ranks) : 1.0);
    if (!local_ins) {
      const LogicalTensor* t = node.inputs.empty() ? nullptr : g->find(node.inputs[0]);
      return invalid_argument("{}: what each rank holds of '{}' is not known{}", what,
                              node.inputs.empty() ? "" : node.inputs[0],
                              t == nullptr ? " (no such tensor)" : ": an op before it infers no shape from a rank's own");
    }
    Status s = infer_op(*def, node.attrs, *local_ins, &local_outs);
    if (!s.ok()) return s.with_context(what);
    const TensorMeta& x = g->find(node.inputs[0])->meta;
    // all_reduce: the input's layout (settled by SBP deduction); all_gather:
    // the gathered tensor whole; reduce_scatter: the sum, split.
    const std::vector<TensorMeta> logical = {node.type == "all_reduce"   ? x
                                             : node.type == "all_gather" ? local_outs[0]
                                                                         : (*local_ins)[0]};
    const std::vector<std::string> outputs = node.outputs;
    RILL_RETURN_IF_ERROR(g->append_op(std::move(node), &logical));
    g->find(outputs[0])->local = local_outs[0];
    return {};
  }
  if (local_ins && !infer_op(*def, node.attrs, *local_ins, &local_outs).ok()) local_ins.reset();
  const std::vector<std::string> outputs = node.outputs;
  RILL_RETURN_IF_ERROR(g->append_op(std::move(node)));
  if (local_ins && local_outs.size() == outputs.size())
    for (size_t k = 0; k < outputs.size(); ++k) g->find(outputs[k])->local = local_outs[k];
  return {};
}

}  // namespace

StatusOr<LogicalGraph> build_logical_graph(const graph::Job& job, const Cluster& cluster, Mode mode) {
  RILL_RETURN_IF_ERROR(graph::check_job(job));
  RILL_RETURN_IF_ERROR(check_cluster(cluster));
  LogicalGraph g;
  g.job_name = job.name;
  g.mode = mode;
  g.cluster = cluster;
  g.shuffle = mode == Mode::kTrain && job.train.shuffle;
  g.seed = job.train.seed;
  g.log_every = job.train.log_every;
  if (mode == Mode::kEval) {
    if (!job.eval) return invalid_argument("job has no eval section to evaluate with");
    g.global_batch = job.eval->batch_size;
  } else {
    g.global_batch = job.train.batch_size;
    g.micro_batches = job.train.micro_batches;  // check_job: >= 1, divides the batch
    g.schedule = job.train.schedule;
    g.allow_tf32 = job.train.allow_tf32 || job.train.precision == graph::Precision::kTF32;
    g.reuse_memory = job.train.reuse_memory;
    g.cuda_graphs = job.train.cuda_graphs;
    g.nccl = job.train.nccl;
    g.mirrored = job.mirrored();
    if (g.mirrored) g.global_batch *= cluster.parallel();  // batch_size rows for each rank
  }
  const char* batch_what = mode == Mode::kEval ? "eval.batch_size" : "train.batch_size";
  if (g.global_batch < 1) return invalid_argument("{} is {}, expected at least 1", batch_what, g.global_batch);
  g.placements = {graph::whole_cluster(cluster.device_type, cluster.num_nodes, cluster.devices_per_node)};

  std::set<std::string> names;
  RILL_RETURN_IF_ERROR(add_inputs(job, mode, &g, &names));
  RILL_RETURN_IF_ERROR(add_variables(job, &g, &names));
  if (g.mirrored) set_local_leaves(&g);
  Autocast autocast(job.train.precision);
  // ZeRO (train.zero): a variable the job did not place by hand, split S(0)
  // so that each device keeps and updates its rows, is read whole by the
  // ops of the job (an input hint B: one all-gather a step, which its
  // readers share), so its gradient arrives reduce-scattered. Left to
  // deduction, a greedy choice may keep the weight split and split a far
  // larger activation instead (the logits of a tied embedding: 3 GiB more
  // a device on GPT-2 124M). A cast autocast puts before a matmul reads
  // the rows as they lie, and the matmul gathers the 16-bit copy: half the
  // bytes.
  std::set<std::string> zero_split;
  for (const VariableNode& v : g.variables)
    if (job.train.zero && !v.variable.sbp && v.sbp.has(Sbp::kSplit)) zero_split.insert(v.variable.name);
  // Ops are in definition order (check_job requires every input to be defined
  // earlier), which is a topological order.
  for (const graph::Op& op : job.ops) {
    if (op.output_sbp.size() > op.outputs.size())
      return invalid_argument("op '{}': {} output SBP hints for {} outputs", op.name, op.output_sbp.size(),
                              op.outputs.size());
    if (op.attrs.has("micro_batches"))
      return invalid_argument(
          "op '{}': attr 'micro_batches' is the compiler's (it marks ops that accumulate gradients); "
          "set train.micro_batches instead",
          op.name);
    OpNode node;
    node.name = op.name;
    node.type = op.type;
    node.inputs = op.inputs;
    node.outputs = op.outputs;
    node.attrs = op.attrs;
    node.recompute = op.recompute;
    if (const OpDef* def = find_op(op.type); mode == Mode::kEval && def != nullptr && def->identity_in_eval) {
      node.type = "identity";  // dropout: training only
      node.attrs = {};
    } else if (def != nullptr && def->seeded && !node.attrs.has("seed")) {
      // An unwritten seed from the op's name: two dropouts of a layer draw
      // apart, and every node, run and layout draws alike.
      node.attrs.set("seed", static_cast<int64_t>(name_seed(op.name)));
    }
    node.output_hints = op.output_sbp;
    node.output_hints.resize(op.outputs.size());
    const std::string what = fmt::format("op '{}'", op.name);
    RILL_ASSIGN_OR_RETURN(node.placement, resolve_placement(job, op.name, op.placement, what, &g));
    for (std::optional<NdSbp>& hint : node.output_hints)
      if (hint) {
        RILL_ASSIGN_OR_RETURN(*hint, place_sbp(*hint, node.placement, what, g));
        g.two_d = g.two_d || !hint->flat();
      }
    node.input_hints.resize(node.inputs.size());
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (zero_split.count(node.inputs[k]) != 0) node.input_hints[k] = NdSbp(Sbp::broadcast());
    for (OpNode& cast : autocast.casts_for(&node, g)) RILL_RETURN_IF_ERROR(append_forward_op(std::move(cast), &g));
    RILL_RETURN_IF_ERROR(append_forward_op(std::move(node), &g));
  }
  RILL_RETURN_IF_ERROR(add_reported(job, mode, &g));
  // Text is sampled from the logits after training: a tensor of another
  // shape is refused now, not after the last step. Bytes have 256 classes;
  // GPT-2's tokens 50,257, padded or not.
  if (mode == Mode::kTrain && job.generate)
    if (const LogicalTensor* logits = g.find(job.generate->logits); logits != nullptr) {
      const Shape& s = logits->meta.shape;
      const graph::Input* input = nullptr;
      for (const graph::Input& in : job.inputs)
        if (in.name == job.generate->input) input = &in;
      const int64_t context = input != nullptr && input->shape.size() == 1 ? input->shape[0] : -1;
      const bool gpt2 = job.generate->tokenizer == "gpt2";
      constexpr int64_t kGpt2Tokens = 50257;
      if (logits->meta.dtype != DType::kF32 || s.size() != 3 || s[1] != context ||
          (gpt2 ? s[2] < kGpt2Tokens : s[2] != 256))
        return invalid_argument("generate.logits: '{}' is {} {}; text is sampled from {}, f32 [batch, {}, {}] (the "
                                "context of generate.input '{}')",
                                job.generate->logits, dtype_name(logits->meta.dtype), shape_string(s),
                                gpt2 ? "the logits of GPT-2's tokens" : "a byte model's logits", context,
                                gpt2 ? "50257 or more" : "256", job.generate->input);
    }
  std::vector<std::string> roots;
  for (const Reported& r : g.reported) roots.push_back(r.tensor);
  if (mode == Mode::kTrain)
    for (const std::string& name : job.fetch) {
      if (g.find(name) == nullptr) return not_found("fetch: unknown tensor '{}'", name);
      for (const Reported& f : g.fetched)
        if (f.tensor == name) return invalid_argument("fetch: tensor '{}' is fetched twice", name);
      g.fetched.push_back({name, name});
      roots.push_back(name);
    }
  g.prune(roots);
  return g;
}

}  // namespace rill::compiler
