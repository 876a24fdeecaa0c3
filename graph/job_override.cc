// apply_override: "section.field=value" assignments from the command line.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>

#include "graph/check_util.h"
#include "graph/job_file.h"

namespace rill::graph {
namespace {

// Parses into a local: from_chars stores the prefix of "1.5", and a failed
// override must leave the job unchanged.
Status parse_int(const std::string& text, int64_t* out) {
  const char* end = text.data() + text.size();
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty()) return invalid_argument("'{}' is not an integer", text);
  *out = v;
  return {};
}

Status parse_int32(const std::string& text, int* out) {
  int64_t v = 0;
  RILL_RETURN_IF_ERROR(parse_int(text, &v));
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    return invalid_argument("'{}' is out of range", text);
  *out = static_cast<int>(v);
  return {};
}

Status parse_uint(const std::string& text, uint64_t* out) {
  int64_t v = 0;
  RILL_RETURN_IF_ERROR(parse_int(text, &v));
  if (v < 0) return invalid_argument("'{}' must be >= 0", text);
  *out = static_cast<uint64_t>(v);
  return {};
}

Status parse_float(const std::string& text, double* out) {
  char* end = nullptr;
  double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    return invalid_argument("'{}' is not a finite number", text);
  *out = v;
  return {};
}

Status parse_bool(const std::string& text, bool* out) {
  if (text == "true" || text == "1") *out = true;
  else if (text == "false" || text == "0") *out = false;
  else return invalid_argument("'{}' is not a bool (true or false)", text);
  return {};
}

template <typename E>
Status parse_choice(const std::string& text, E* out) {
  if (!parse_mode(text, out)) return invalid_argument("'{}' is not one of {}", text, mode_choices<E>());
  return {};
}

using Setter = std::function<Status(Job*, const std::string&)>;

struct Setting {
  const char* key;
  Setter set;
};

Distributed* dist(Job* job) {
  if (!job->distributed) job->distributed = Distributed{};
  return &*job->distributed;
}

Eval* need_eval(Job* job) { return job->eval ? &*job->eval : nullptr; }

Status no_eval() { return invalid_argument("the job has no eval section; set eval.dataset first"); }

// `eval=off`, `generate=off`: the section's pass is left out of this run.
template <typename Section>
Status section_off(std::optional<Section>* section, const std::string& value, const char* name) {
  if (value != "off")
    return invalid_argument("'{}': only {}=off (leave the pass out) can be set; set its fields as {}.FIELD", value,
                            name, name);
  section->reset();
  return {};
}

// generate.FIELD: a field of the job's own generate section.
Status set_generate(Job* job, const std::function<Status(Generate*)>& set) {
  if (!job->generate) return invalid_argument("the job has no generate section");
  return set(&*job->generate);
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> kSettings = {
      {"name", [](Job* j, const std::string& v) { j->name = v; return Status(); }},
      {"loss", [](Job* j, const std::string& v) { j->loss = v; return Status(); }},
      {"train.steps", [](Job* j, const std::string& v) { return parse_int(v, &j->train.steps); }},
      {"train.epochs", [](Job* j, const std::string& v) { return parse_int(v, &j->train.epochs); }},
      {"train.batch_size", [](Job* j, const std::string& v) { return parse_int(v, &j->train.batch_size); }},
      {"train.log_every", [](Job* j, const std::string& v) { return parse_int(v, &j->train.log_every); }},
      {"train.bucket_bytes", [](Job* j, const std::string& v) { return parse_int(v, &j->train.bucket_bytes); }},
      {"train.micro_batches", [](Job* j, const std::string& v) { return parse_int(v, &j->train.micro_batches); }},
      {"train.seed", [](Job* j, const std::string& v) { return parse_uint(v, &j->train.seed); }},
      {"train.shuffle", [](Job* j, const std::string& v) { return parse_bool(v, &j->train.shuffle); }},
      {"train.zero", [](Job* j, const std::string& v) { return parse_bool(v, &j->train.zero); }},
      {"train.allow_tf32", [](Job* j, const std::string& v) { return parse_bool(v, &j->train.allow_tf32); }},
      {"train.precision", [](Job* j, const std::string& v) { return parse_choice(v, &j->train.precision); }},
      {"train.compression", [](Job* j, const std::string& v) { return parse_choice(v, &j->train.compression); }},
      {"train.compression_rank",
       [](Job* j, const std::string& v) { return parse_int(v, &j->train.compression_rank); }},
      {"train.compression_start_step",
       [](Job* j, const std::string& v) { return parse_int(v, &j->train.compression_start_step); }},
      {"train.loss_scale", [](Job* j, const std::string& v) { return parse_float(v, &j->train.loss_scale); }},
      {"train.loss_scale_window",
       [](Job* j, const std::string& v) { return parse_int(v, &j->train.loss_scale_window); }},
      {"train.reuse_memory", [](Job* j, const std::string& v) { return parse_bool(v, &j->train.reuse_memory); }},
      {"train.cuda_graphs", [](Job* j, const std::string& v) { return parse_bool(v, &j->train.cuda_graphs); }},
      {"train.nccl", [](Job* j, const std::string& v) { return parse_bool(v, &j->train.nccl); }},
      {"train.buckets_by_link", [](Job* j, const std::string& v) { return parse_bool(v, &j->train.buckets_by_link); }},
      {"train.devices", [](Job* j, const std::string& v) { j->train.devices = v; return Status(); }},
      {"train.schedule", [](Job* j, const std::string& v) { return parse_choice(v, &j->train.schedule); }},
      {"pipeline.num_stages",
       [](Job* j, const std::string& v) {
         if (!j->pipeline) j->pipeline.emplace();
         return parse_int(v, &j->pipeline->num_stages);
       }},
      {"pipeline.balance",
       [](Job* j, const std::string& v) {
         if (!j->pipeline) j->pipeline.emplace();
         j->pipeline->balance = v;
         return Status();
       }},
      {"train.view", [](Job* j, const std::string& v) { return parse_choice(v, &j->train.view); }},
      {"optimizer.type", [](Job* j, const std::string& v) { j->optimizer.type = v; return Status(); }},
      {"optimizer.lr", [](Job* j, const std::string& v) { return parse_float(v, &j->optimizer.lr); }},
      {"optimizer.momentum", [](Job* j, const std::string& v) { return parse_float(v, &j->optimizer.momentum); }},
      {"optimizer.beta1", [](Job* j, const std::string& v) { return parse_float(v, &j->optimizer.beta1); }},
      {"optimizer.beta2", [](Job* j, const std::string& v) { return parse_float(v, &j->optimizer.beta2); }},
      {"optimizer.epsilon", [](Job* j, const std::string& v) { return parse_float(v, &j->optimizer.epsilon); }},
      {"optimizer.weight_decay",
       [](Job* j, const std::string& v) { return parse_float(v, &j->optimizer.weight_decay); }},
      {"optimizer.clip_grad_norm",
       [](Job* j, const std::string& v) { return parse_float(v, &j->optimizer.clip_grad_norm); }},
      {"optimizer.warmup_steps",
       [](Job* j, const std::string& v) { return parse_int(v, &j->optimizer.warmup_steps); }},
      {"optimizer.decay_steps", [](Job* j, const std::string& v) { return parse_int(v, &j->optimizer.decay_steps); }},
      {"optimizer.min_lr", [](Job* j, const std::string& v) { return parse_float(v, &j->optimizer.min_lr); }},
      {"eval.dataset",
       [](Job* j, const std::string& v) {
         if (!j->eval) j->eval = Eval{};
         j->eval->dataset = v;
         return Status();
       }},
      {"eval.batch_size",
       [](Job* j, const std::string& v) {
         Eval* e = need_eval(j);
         return e ? parse_int(v, &e->batch_size) : no_eval();
       }},
      {"eval", [](Job* j, const std::string& v) { return section_off(&j->eval, v, "eval"); }},
      {"generate", [](Job* j, const std::string& v) { return section_off(&j->generate, v, "generate"); }},
      {"generate.prompt",
       [](Job* j, const std::string& v) {
         return set_generate(j, [&](Generate* g) { g->prompt = v; return Status(); });
       }},
      // 0 leaves the text out, as generate=off.
      {"generate.tokens",
       [](Job* j, const std::string& v) {
         int64_t tokens = 0;
         RILL_RETURN_IF_ERROR(parse_int(v, &tokens));
         if (tokens == 0 && j->generate) j->generate.reset();
         return tokens == 0 ? Status() : set_generate(j, [&](Generate* g) { g->tokens = tokens; return Status(); });
       }},
      {"generate.temperature",
       [](Job* j, const std::string& v) {
         return set_generate(j, [&](Generate* g) { return parse_float(v, &g->temperature); });
       }},
      {"generate.top_k",
       [](Job* j, const std::string& v) { return set_generate(j, [&](Generate* g) { return parse_int(v, &g->top_k); }); }},
      {"generate.seed",
       [](Job* j, const std::string& v) { return set_generate(j, [&](Generate* g) { return parse_int(v, &g->seed); }); }},
      {"generate.tokenizer",
       [](Job* j, const std::string& v) {
         return set_generate(j, [&](Generate* g) { g->tokenizer = v; return Status(); });
       }},
      {"generate.vocab",
       [](Job* j, const std::string& v) { return set_generate(j, [&](Generate* g) { g->vocab = v; return Status(); }); }},
      {"checkpoint.dir", [](Job* j, const std::string& v) { j->checkpoint.dir = v; return Status(); }},
      {"checkpoint.every", [](Job* j, const std::string& v) { return parse_int(v, &j->checkpoint.every); }},
      {"checkpoint.keep", [](Job* j, const std::string& v) { return parse_int32(v, &j->checkpoint.keep); }},
      {"checkpoint.overwrite", [](Job* j, const std::string& v) { return parse_bool(v, &j->checkpoint.overwrite); }},
      {"checkpoint.dtype",
       [](Job* j, const std::string& v) {
         if (!parse_dtype(v, &j->checkpoint.dtype))
           return invalid_argument("'{}' is not a dtype (f32, bf16 or f16)", v);
         return Status();
       }},
      // A distributed section is made by its first setting (mode "pserver").
      {"distributed.mode", [](Job* j, const std::string& v) { return parse_choice(v, &dist(j)->mode); }},
      {"distributed.pservers",
       [](Job* j, const std::string& v) {
         dist(j)->pservers.clear();
         std::string entry;
         for (char c : v + ",") {
           if (c != ',') {
             if (c != ' ') entry += c;
           } else if (!entry.empty()) {
             dist(j)->pservers.push_back(entry);
             entry.clear();
           }
         }
         return Status();
       }},
      {"distributed.trainers", [](Job* j, const std::string& v) { return parse_int(v, &dist(j)->trainers); }},
      {"distributed.sync_mode", [](Job* j, const std::string& v) { return parse_bool(v, &dist(j)->sync_mode); }},
      {"distributed.slice_var_up",
       [](Job* j, const std::string& v) { return parse_bool(v, &dist(j)->slice_var_up); }},
      {"distributed.split_method", [](Job* j, const std::string& v) { return parse_choice(v, &dist(j)->split_method); }},
      {"distributed.min_block_size",
       [](Job* j, const std::string& v) { return parse_int(v, &dist(j)->min_block_size); }},
      {"distributed.enable_dc_asgd",
       [](Job* j, const std::string& v) { return parse_bool(v, &dist(j)->enable_dc_asgd); }},
      {"distributed.print_log", [](Job* j, const std::string& v) { return parse_bool(v, &dist(j)->print_log); }},
      {"distributed.rpc_deadline",
       [](Job* j, const std::string& v) { return parse_int(v, &dist(j)->rpc_deadline); }},
      {"distributed.rpc_send_thread_num",
       [](Job* j, const std::string& v) { return parse_int(v, &dist(j)->rpc_send_thread_num); }},
      {"distributed.rpc_get_thread_num",
       [](Job* j, const std::string& v) { return parse_int(v, &dist(j)->rpc_get_thread_num); }},
      {"distributed.rpc_prefetch_thread_num",
       [](Job* j, const std::string& v) { return parse_int(v, &dist(j)->rpc_prefetch_thread_num); }},
  };
  return kSettings;
}

// The dataset fields a run may point elsewhere: datasets.NAME.FIELD=value.
Status set_dataset_field(Job* job, const std::string& key, const std::string& value) {
  std::string rest = key.substr(std::string("datasets.").size());
  size_t dot = rest.rfind('.');
  if (dot == std::string::npos) return invalid_argument("'{}': expected datasets.NAME.FIELD", key);
  std::string name = rest.substr(0, dot), field = rest.substr(dot + 1);
  Dataset* d = nullptr;
  for (Dataset& candidate : job->datasets)
    if (candidate.name == name) d = &candidate;
  if (d == nullptr)
    return not_found("'{}': no dataset named '{}'{}", key, name, check::did_you_mean(name, check::dataset_names(*job)));
  if (field == "images") d->images = value;
  else if (field == "labels") d->labels = value;
  else if (field == "path") d->path = value;
  else if (field == "num_samples") return parse_int(value, &d->num_samples);
  else if (field == "seed") return parse_uint(value, &d->seed);
  else if (field == "scale") {
    double scale = 0;
    RILL_RETURN_IF_ERROR(parse_float(value, &scale));
    d->scale = static_cast<float>(scale);
  } else {
    return invalid_argument("'{}': datasets.NAME.{} cannot be set (images, labels, path, num_samples, seed, scale)",
                            key, field);
  }
  return {};
}

}  // namespace

std::vector<std::string> override_keys() {
  std::vector<std::string> keys;
  for (const Setting& s : settings()) keys.push_back(s.key);
  keys.push_back("datasets.NAME.{images,labels,path,num_samples,seed,scale}");
  return keys;
}

Status apply_override(Job* job, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    return invalid_argument("'{}': expected section.field=value, e.g. train.steps=100", assignment);
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  Status s;
  if (key.rfind("datasets.", 0) == 0) {
    s = set_dataset_field(job, key, value);
  } else {
    const Setting* found = nullptr;
    std::vector<std::string> keys;
    for (const Setting& setting : settings()) {
      keys.push_back(setting.key);
      if (key == setting.key) found = &setting;
    }
    if (found == nullptr)
      return invalid_argument("unknown setting '{}'{} (known: {})", key, check::did_you_mean(key, keys),
                              check::name_list(override_keys(), 100));
    s = found->set(job, value);
  }
  return s.with_context(key);
}

}  // namespace rill::graph
