// The checks of a job's configuration sections: datasets, optimizer, train
// and eval. The graph sections are checked in job_check.cc.
#include <algorithm>
#include <cmath>
#include <set>

#include "base/actor_id.h"
#include "base/devices.h"
#include "graph/check_util.h"
#include "kernels/powersgd_layout.h"

namespace rill::graph {

namespace check {
namespace {

const std::vector<std::string> kDatasetKinds = {"idx", "csv", "synthetic", "inline", "text", "tokens"};
const std::vector<std::string> kOptimizers = {"sgd", "momentum", "adam", "adamw"};

void check_inline_tensors(const Dataset& d, const std::string& where, const std::string& path, Issues* issues) {
  if (d.tensors.empty()) {
    issues->add(path, "{}: an inline dataset needs 'tensors'", where);
    return;
  }
  std::set<std::string> names;
  int64_t samples = -1;
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    const InlineTensor& t = d.tensors[i];
    std::string tensor_path = fmt::format("{}.tensors[{}]", path, i);
    std::string what = fmt::format("{}: {}", where, label("tensors", i, t.name));
    if (t.name.empty()) issues->add(tensor_path, "{}: has no name", what);
    else if (!names.insert(t.name).second) issues->add(tensor_path, "{}: the name is used twice", what);
    if (t.shape.empty()) {
      issues->add(tensor_path, "{}: shape [] has no sample axis; axis 0 must index samples", what);
      continue;
    }
    if (!sane_shape(t.shape)) {
      issues->add(tensor_path, "{}: shape {}: every dim must be in [1, 2^31), at most 8 axes and 2^40 bytes", what,
                  shape_string(t.shape));
      continue;
    }
    if (samples < 0) samples = t.shape[0];
    else if (t.shape[0] != samples)
      issues->add(tensor_path, "{}: {} samples on axis 0, but tensors[0] has {}", what, t.shape[0], samples);
    const size_t given = t.held(), other = t.held_by_other_dtypes();
    if (static_cast<int64_t>(given) != num_elements(t.shape))
      issues->add(tensor_path, "{}: shape {} needs {} values, found {}", what, shape_string(t.shape),
                  num_elements(t.shape), given);
    if (other != 0) issues->add(tensor_path, "{}: dtype is {} but values of the other dtype were given", what,
                                dtype_name(t.dtype));
  }
}

}  // namespace

void check_datasets(const Job& job, Issues* issues) {
  std::set<std::string> names;
  for (size_t i = 0; i < job.datasets.size(); ++i) {
    const Dataset& d = job.datasets[i];
    std::string path = fmt::format("datasets[{}]", i);
    std::string where = label("datasets", i, d.name);
    if (d.name.empty()) issues->add(path, "{}: has no name", where);
    else if (!names.insert(d.name).second) issues->add(path, "{}: dataset name '{}' is used twice", where, d.name);
    if (!std::isfinite(d.scale)) issues->add(path + ".scale", "{}: scale must be finite, got {}", where, d.scale);
    if (d.kind == "idx") {
      if (d.images.empty()) issues->add(path, "{}: an idx dataset needs 'images' (the images file)", where);
      if (d.labels.empty()) issues->add(path, "{}: an idx dataset needs 'labels' (the labels file)", where);
    } else if (d.kind == "csv") {
      if (d.path.empty()) issues->add(path, "{}: a csv dataset needs 'path'", where);
      if (d.label_column < -1)
        issues->add(path + ".label_column", "{}: label_column {} is invalid (use -1 for no label)", where,
                    d.label_column);
    } else if (d.kind == "synthetic") {
      if (d.num_samples < 1)
        issues->add(path + ".num_samples", "{}: a synthetic dataset needs num_samples >= 1, got {}", where,
                    d.num_samples);
      if (d.num_classes < 1)
        issues->add(path + ".num_classes", "{}: num_classes must be >= 1, got {}", where, d.num_classes);
      if (d.id_fields < 0 || d.id_fields > 4096)
        issues->add(path + ".id_fields", "{}: id_fields must be in [0, 4096], got {}", where, d.id_fields);
      if (d.id_fields > 0 && (d.id_range < 1 || d.id_range > (int64_t{1} << 31) - 1))
        issues->add(path + ".id_range", "{}: id_range must be in [1, 2^31) with id_fields, got {}", where, d.id_range);
      if (!sane_shape(d.feature_shape))
        issues->add(path + ".feature_shape", "{}: feature_shape {}: every dim must be in [1, 2^31), at most 8 axes and 2^40 bytes",
                    where, shape_string(d.feature_shape));
    } else if (d.kind == "text" || d.kind == "tokens") {
      if (d.path.empty()) issues->add(path, "{}: a {} dataset needs 'path'", where, d.kind);
      if (d.context < 1)
        issues->add(path + ".context", "{}: a {} dataset needs context >= 1 (tokens per sample), got {}", where,
                    d.kind, d.context);
      if (!(d.split_from >= 0 && d.split_from < d.split_to && d.split_to <= 1))
        issues->add(path + ".split", "{}: split [{}, {}] must be fractions with 0 <= from < to <= 1", where,
                    d.split_from, d.split_to);
    } else if (d.kind == "inline") {
      check_inline_tensors(d, where, path, issues);
    } else {
      issues->add(path + ".kind", "{}: unknown kind '{}'{} (expected idx, csv, synthetic, inline, text or tokens)",
                  where, d.kind,
                  did_you_mean(d.kind, kDatasetKinds));
      continue;
    }
    // A field the kind does not read is a sign of the wrong kind (or a
    // misplaced field), not something to ignore.
    struct KindField {
      const char* name;
      bool set;
      const char* kinds;  // that read it
    };
    const KindField fields[] = {
        {"images", !d.images.empty(), "idx"},
        {"labels", !d.labels.empty(), "idx"},
        {"path", !d.path.empty(), "csv, text, tokens"},
        {"label_column", d.label_column != -1, "csv"},
        {"header", d.header, "csv"},
        {"num_samples", d.num_samples != 0, "synthetic"},
        {"num_classes", d.num_classes != 10, "synthetic"},
        {"feature_shape", !d.feature_shape.empty(), "synthetic"},
        {"id_fields", d.id_fields != 0, "synthetic"},
        {"id_range", d.id_range != 0, "synthetic"},
        {"seed", d.seed != 0, "synthetic"},
        {"tensors", !d.tensors.empty(), "inline"},
        {"context", d.context != 0, "text, tokens"},
        {"split", d.split_from != 0.0 || d.split_to != 1.0, "text, tokens"},
    };
    for (const KindField& f : fields) {
      if (!f.set) continue;
      bool read = false;
      for (std::string_view kinds = f.kinds; !kinds.empty();) {
        const size_t comma = kinds.find(", ");
        read = read || kinds.substr(0, comma) == d.kind;
        kinds = comma == std::string_view::npos ? std::string_view() : kinds.substr(comma + 2);
      }
      if (!read)
        issues->add(path + "." + f.name, "{}: '{}' is not read by {} datasets; {} datasets read it (is the kind right?)",
                    where, f.name, d.kind, f.kinds);
    }
  }
}

namespace {

// Generation reads bytes into an i32 [context] input of a text dataset, or
// GPT-2's tokens into one of a tokens dataset.
void check_generate(const Job& job, Issues* issues) {
  const Generate& g = *job.generate;
  const bool gpt2 = g.tokenizer == "gpt2";
  if (g.tokenizer != "bytes" && !gpt2)
    issues->add("generate.tokenizer", "generate.tokenizer must be \"bytes\" or \"gpt2\", got \"{}\"", g.tokenizer);
  const char* kind = gpt2 ? "tokens" : "text";
  if (gpt2 && g.vocab.empty())
    issues->add("generate.vocab", "generate.vocab is empty: gpt2 reads its vocabulary from a folder (default data/gpt2)");
  const Input* input = nullptr;
  for (const Input& in : job.inputs)
    if (in.name == g.input) input = &in;
  if (input == nullptr) {
    issues->add("generate.input", "generate: '{}' is not an input", g.input);
  } else {
    const Dataset* d = nullptr;
    for (const Dataset& dataset : job.datasets)
      if (dataset.name == input->dataset) d = &dataset;
    if (d == nullptr || d->kind != kind || input->shape.size() != 1 || input->dtype != DType::kI32)
      issues->add("generate.input", "generate: input '{}' must read the tokens of a {} dataset ({}), i32 [context]",
                  g.input, kind, gpt2 ? "GPT-2's byte-pair tokens" : "bytes are its tokens");
  }
  bool made = false;
  for (const Op& op : job.ops)
    for (const std::string& out : op.outputs) made = made || out == g.logits;
  if (!made) issues->add("generate.logits", "generate: no op makes '{}'", g.logits);
  if (g.tokens < 1 || g.tokens > 1000000)
    issues->add("generate.tokens", "generate.tokens must be in [1, 1000000], got {}", g.tokens);
  if (!(g.temperature >= 0) || !std::isfinite(g.temperature))
    issues->add("generate.temperature", "generate.temperature must be >= 0, got {}", g.temperature);
  if (g.top_k < 0) issues->add("generate.top_k", "generate.top_k must be >= 0, got {}", g.top_k);
}

void check_optimizer(const Optimizer& o, Issues* issues) {
  bool known = false;
  for (const std::string& type : kOptimizers) known = known || o.type == type;
  if (!known)
    issues->add("optimizer.type", "optimizer: unknown type '{}'{} (expected sgd, momentum, adam or adamw)", o.type,
                did_you_mean(o.type, kOptimizers));
  const bool lr_ok = o.lr > 0 && std::isfinite(o.lr);
  if (!lr_ok) issues->add("optimizer.lr", "optimizer.lr must be a finite number > 0, got {}", o.lr);
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay))
    issues->add("optimizer.weight_decay", "optimizer.weight_decay must be a finite number >= 0, got {}", o.weight_decay);
  if (o.type == "momentum" && !(o.momentum >= 0 && o.momentum < 1))
    issues->add("optimizer.momentum", "optimizer.momentum must be in [0, 1), got {}", o.momentum);
  if (!(o.clip_grad_norm >= 0) || !std::isfinite(o.clip_grad_norm))
    issues->add("optimizer.clip_grad_norm", "optimizer.clip_grad_norm must be a finite number >= 0 (0: no clipping), got {}",
                o.clip_grad_norm);
  if (o.warmup_steps < 0)
    issues->add("optimizer.warmup_steps", "optimizer.warmup_steps must be >= 0, got {}", o.warmup_steps);
  if (o.decay_steps != 0 && o.decay_steps <= o.warmup_steps)
    issues->add("optimizer.decay_steps", "optimizer.decay_steps {} must be past warmup_steps {} (or 0: no decay)",
                o.decay_steps, o.warmup_steps);
  if (lr_ok && !(o.min_lr >= 0 && o.min_lr <= o.lr))  // a bad lr is said once, above
    issues->add("optimizer.min_lr", "optimizer.min_lr must be in [0, lr = {}], got {}", o.lr, o.min_lr);
  if (o.type == "adam" || o.type == "adamw") {
    if (!(o.beta1 >= 0 && o.beta1 < 1))
      issues->add("optimizer.beta1", "optimizer.beta1 must be in [0, 1), got {}", o.beta1);
    if (!(o.beta2 >= 0 && o.beta2 < 1))
      issues->add("optimizer.beta2", "optimizer.beta2 must be in [0, 1), got {}", o.beta2);
    if (!(o.epsilon > 0) || !std::isfinite(o.epsilon))
      issues->add("optimizer.epsilon", "optimizer.epsilon must be a finite number > 0, got {}", o.epsilon);
  }
}

// The datasets the inputs read, each once, in order.
std::vector<const Dataset*> datasets_read(const Job& job) {
  std::vector<const Dataset*> out;
  for (const Input& in : job.inputs) {
    const Dataset* d = find_dataset(job, in.dataset);
    if (d != nullptr && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  return out;
}

// A global batch must cover every device and fit in the dataset.
// `per_rank`: the batch is each device's (the mirrored view), so a step
// reads batch x devices rows and is never smaller than the devices.
void check_batch(const std::string& path, int64_t batch, int devices, const std::vector<const Dataset*>& read,
                 Issues* issues, bool per_rank = false) {
  if (batch < 1) {
    issues->add(path, "{} must be > 0, got {}", path, batch);
    return;
  }
  if (!per_rank && devices > 0 && batch < devices)
    issues->add(path, "{} {} is smaller than the {} devices it is split over", path, batch, devices);
  const int64_t rows = per_rank ? batch * std::max(devices, 1) : batch;
  for (const Dataset* d : read) {
    int64_t samples = known_num_samples(*d);
    if (samples > 0 && rows > samples)
      issues->add(path, "{} {}{} is larger than dataset '{}' ({} samples)", path, batch,
                  per_rank ? fmt::format(" on each of {} devices", devices) : std::string(), d->name, samples);
  }
}

void check_eval(const Job& job, int devices, Issues* issues) {
  const Eval& e = *job.eval;
  const Dataset* d = find_dataset(job, e.dataset);
  if (d == nullptr) {
    issues->add("eval.dataset", "eval: unknown dataset '{}'{} (known: {})", e.dataset,
                did_you_mean(e.dataset, dataset_names(job)), name_list(dataset_names(job)));
  }
  check_batch("eval.batch_size", e.batch_size, devices, d ? std::vector<const Dataset*>{d} : datasets_read(job),
              issues);
  if (d == nullptr) return;
  // In eval every input reads the eval dataset: it must offer the same fields.
  std::vector<FieldInfo> fields = dataset_fields(*d);
  for (size_t i = 0; i < job.inputs.size(); ++i) {
    const Input& in = job.inputs[i];
    if (in.dataset == e.dataset) continue;  // checked with the input itself
    const FieldInfo* match = nullptr;
    for (const FieldInfo& f : fields)
      if (f.name == in.field) match = &f;
    if (match == nullptr) {
      issues->add("eval.dataset", "eval: dataset '{}' has no field '{}', which {} reads", e.dataset, in.field,
                  label("inputs", i, in.name));
    } else if (match->dtype != in.dtype || (match->shape && *match->shape != in.shape)) {
      issues->add("eval.dataset", "eval: dataset '{}' field '{}' is {} {}, but {} is {} {}", e.dataset, in.field,
                  dtype_name(match->dtype), match->shape ? shape_string(*match->shape) : "[?]",
                  label("inputs", i, in.name), dtype_name(in.dtype), shape_string(in.shape));
    }
  }
}

// The mirrored view places nothing by hand: every device is a rank running
// the whole model, inputs split by rank, variables replicated.
void check_view(const Job& job, Issues* issues) {
  const TrainConfig& t = job.train;
  if (!job.mirrored()) return;
  const char* why = "under train.view \"mirrored\" every device is a rank running the whole model";
  for (size_t i = 0; i < job.inputs.size(); ++i)
    if (job.inputs[i].sbp || job.inputs[i].placement)
      issues->add(fmt::format("inputs[{}]", i), "{} has an SBP or placement: {} on its own rows; drop it",
                  label("inputs", i, job.inputs[i].name), why);
  for (size_t i = 0; i < job.variables.size(); ++i)
    if (job.variables[i].sbp || job.variables[i].placement)
      issues->add(fmt::format("variables[{}]", i), "{} has an SBP or placement: {} with a replica of every variable; drop it",
                  label("variables", i, job.variables[i].name), why);
  for (size_t i = 0; i < job.ops.size(); ++i)
    if (job.ops[i].placement || !job.ops[i].output_sbp.empty())
      issues->add(fmt::format("ops[{}]", i), "{} has an SBP or placement: {}; drop it", label("ops", i, job.ops[i].name),
                  why);
  if (!job.groups.empty()) issues->add("groups", "groups place ops by hand: {}; drop them", why);
  if (job.pipeline) issues->add("pipeline", "a pipeline cuts the model into stages: {}; drop it", why);
  if (t.zero) issues->add("train.zero", "train.zero splits the variables: {} with a replica of every variable", why);
}

void check_checkpoint(const CheckpointConfig& c, Issues* issues) {
  if (c.every < 0) issues->add("checkpoint.every", "checkpoint.every must be >= 0, got {}", c.every);
  if (c.keep < 1) issues->add("checkpoint.keep", "checkpoint.keep must be >= 1, got {}", c.keep);
  if (!is_float(c.dtype))
    issues->add("checkpoint.dtype", "checkpoint.dtype must be f32, bf16 or f16, got {}", dtype_name(c.dtype));
  if (c.every > 0 && c.dir.empty())
    issues->add("checkpoint.every", "checkpoint.every is {} but checkpoint.dir is empty; set the directory to save in",
                c.every);
}

}  // namespace

// train.loss_scale: a power of two an f32 holds (2^0 to 2^127); scaling
// decides for all gradients at once, so it needs them in one view (as
// clipping does): the consistent view, or the mirrored one, whose ranks
// all hold the averaged gradients; not parameter servers.
void check_loss_scale(const Job& job, Issues* issues) {
  const TrainConfig& t = job.train;
  int exponent = 0;
  if (t.loss_scale != 0 && (!std::isfinite(t.loss_scale) || std::frexp(t.loss_scale, &exponent) != 0.5 ||
                            exponent < 1 || exponent > 128))
    issues->add("train.loss_scale", "train.loss_scale must be a power of two from 1 to 2^127 (or 0: 65536 under f16), "
                                    "got {}", t.loss_scale);
  if (t.loss_scale_window < 1 || t.loss_scale_window > (int64_t{1} << 24))
    issues->add("train.loss_scale_window", "train.loss_scale_window must be in [1, 2^24], got {}",
                t.loss_scale_window);
  if ((t.precision == Precision::kF16 || t.loss_scale != 0) && job.pserver_mode())
    issues->add(t.loss_scale != 0 ? "train.loss_scale" : "train.precision",
                "loss scaling (train.precision \"f16\" or train.loss_scale) skips a step for every gradient at once; "
                "parameter-server mode has no one view of them (each pserver updates on its own)");
}

void check_run_config(const Job& job, Issues* issues) {
  check_optimizer(job.optimizer, issues);
  if (job.optimizer.clip_grad_norm > 0 && job.pserver_mode())
    issues->add("optimizer.clip_grad_norm",
                "optimizer.clip_grad_norm: clipping by the global norm needs every gradient in one view; "
                "parameter-server mode has none (each pserver updates on its own)");
  const TrainConfig& t = job.train;
  int devices = 0;
  if (auto list = parse_device_list(t.devices); list.ok())
    devices = list->count;
  else
    issues->add("train.devices", "train.{}", list.status().message());
  check_batch("train.batch_size", t.batch_size, devices, datasets_read(job), issues, job.mirrored());
  if (t.steps < 0 || t.steps > kMaxSteps)
    issues->add("train.steps", "train.steps must be in [0, {}], got {}", kMaxSteps, t.steps);
  if (t.epochs < 0 || t.epochs > kMaxSteps)
    issues->add("train.epochs", "train.epochs must be in [0, {}], got {}", kMaxSteps, t.epochs);
  if (t.steps == 0 && t.epochs == 0)
    issues->add("train", "train: steps and epochs are both 0; set one of them to a positive number");
  if (t.log_every < 1) issues->add("train.log_every", "train.log_every must be > 0, got {}", t.log_every);
  if (t.bucket_bytes < 0 || t.bucket_bytes > kMaxTensorBytes)
    issues->add("train.bucket_bytes", "train.bucket_bytes must be in [0, 2^40], got {}", t.bucket_bytes);
  if (t.buckets_by_link && t.bucket_bytes == 0)
    issues->add("train.buckets_by_link",
                "train.buckets_by_link sizes buckets below train.bucket_bytes, which is 0 (one all-reduce per "
                "gradient): give train.bucket_bytes > 0, or leave buckets_by_link off");
  if (t.compression_rank < 1 || t.compression_rank > kMaxCompressionRank)
    issues->add("train.compression_rank", "train.compression_rank must be in [1, {}], got {}", kMaxCompressionRank,
                t.compression_rank);
  if (t.compression_start_step < 0 || t.compression_start_step > kMaxSteps)
    issues->add("train.compression_start_step", "train.compression_start_step must be in [0, {}], got {}", kMaxSteps,
                t.compression_start_step);
  if (t.micro_batches < 1)
    issues->add("train.micro_batches", "train.micro_batches must be > 0, got {}", t.micro_batches);
  else if (t.batch_size >= 1 && t.batch_size % t.micro_batches != 0)
    issues->add("train.micro_batches",
                "train.micro_batches {} does not divide train.batch_size {}: every micro-batch must have as many rows",
                t.micro_batches, t.batch_size);
  else if (t.micro_batches > 1 && devices > 0 && !job.mirrored() && t.batch_size / t.micro_batches < devices)
    issues->add("train.micro_batches",
                "a micro-batch of {} rows (train.batch_size {} / train.micro_batches {}) is smaller than the {} "
                "devices it is split over",
                t.batch_size / t.micro_batches, t.batch_size, t.micro_batches, devices);
  check_loss_scale(job, issues);
  check_view(job, issues);
  if (job.eval) check_eval(job, devices, issues);
  if (job.generate) check_generate(job, issues);
  check_checkpoint(job.checkpoint, issues);
}

}  // namespace check
}  // namespace rill::graph
