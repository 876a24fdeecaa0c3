#include "graph/job_convert.h"
#include "graph/job_expand.h"

#include <cmath>
#include <limits>

namespace rill::graph {
namespace {

using check::Issues;
using check::label;

std::string str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

Shape shape_of(const flatbuffers::Vector<int64_t>* v) {
  return v == nullptr ? Shape{} : Shape(v->begin(), v->end());
}

std::vector<std::string> strings_of(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v != nullptr)
    for (const flatbuffers::String* s : *v) out.push_back(str(s));
  return out;
}

// The vector's elements, for range-for over a possibly absent vector.
template <typename T>
std::vector<const T*> items(const flatbuffers::Vector<flatbuffers::Offset<T>>* v) {
  std::vector<const T*> out;
  if (v != nullptr)
    for (const T* item : *v) out.push_back(item);
  return out;
}

class Converter {
 public:
  Converter(const flatbuffers::Parser& parser, Issues* issues) : parser_(parser), issues_(issues) {}

  void dtype(const flatbuffers::String* text, const std::string& path, const std::string& where, DType* out) {
    if (text == nullptr) return;
    if (!parse_dtype(text->str(), out))
      issues_->add(path, "{}: '{}' is not a dtype (expected f32, i32, bf16 or f16)", where, text->str());
  }

  // A mode's word (graph/job_modes.h).
  template <typename E>
  void mode(const flatbuffers::String* text, const std::string& path, E* out) {
    if (text == nullptr) return;
    if (!parse_mode(text->str(), out))
      issues_->add(path, "{} must be {}, got \"{}\"", path, mode_choices<E>(), text->str());
  }

  std::optional<NdSbp> sbp(const flatbuffers::String* text, const std::string& path, const std::string& where) {
    if (text == nullptr || text->size() == 0) return std::nullopt;
    NdSbp out;
    if (!parse_nd_sbp(text->str(), &out)) {
      issues_->add(path, "{}: '{}' is not an SBP (expected S(axis), B or P, or a pair such as (S(0), B))", where,
                   text->str());
      return std::nullopt;
    }
    return out;
  }

  std::optional<Placement> placement(const flatbuffers::String* text, const std::string& path,
                                     const std::string& where) {
    if (text == nullptr) return std::nullopt;
    auto p = parse_placement(text->str());
    if (!p.ok()) {
      issues_->add(path, "{}: {}", where, p.status().message());
      return std::nullopt;
    }
    return *p;
  }

  template <typename Int>
  void integer(flatbuffers::Optional<int64_t> value, const std::string& path, const std::string& where, Int* out) {
    if (!value) return;
    int64_t v = *value;
    if (v < static_cast<int64_t>(std::numeric_limits<Int>::min()) ||
        (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<Int>::max()))) {
      issues_->add(path, "{}: {} is out of range", where, v);
      return;
    }
    *out = static_cast<Int>(v);
  }

  // Every present field of `table` except `skip`, read by the schema's own
  // field list: bools and ints as int64, floats as double.
  void attrs(const flatbuffers::Table* table, const char* type_name, std::string_view skip, const std::string& path,
             Attrs* out) {
    if (table == nullptr) return;
    const flatbuffers::StructDef* def = parser_.structs_.Lookup(std::string("rill.graph.fb.") + type_name);
    if (def == nullptr) {
      issues_->add(path, "{}: internal error: schema table '{}' not found", path, type_name);
      return;
    }
    for (const flatbuffers::FieldDef* field : def->fields.vec) {
      if (field->name == skip || !table->CheckField(field->value.offset)) continue;
      auto offset = field->value.offset;
      const flatbuffers::Type& type = field->value.type;
      switch (type.base_type) {
        case flatbuffers::BASE_TYPE_BOOL:
          out->set(field->name, int64_t{table->GetField<uint8_t>(offset, 0) != 0});
          break;
        case flatbuffers::BASE_TYPE_LONG:
          out->set(field->name, table->GetField<int64_t>(offset, 0));
          break;
        case flatbuffers::BASE_TYPE_DOUBLE:
          out->set(field->name, table->GetField<double>(offset, 0.0));
          break;
        case flatbuffers::BASE_TYPE_STRING:
          out->set(field->name, str(table->GetPointer<const flatbuffers::String*>(offset)));
          break;
        case flatbuffers::BASE_TYPE_VECTOR:
          if (type.element == flatbuffers::BASE_TYPE_LONG) {
            out->set(field->name, shape_of(table->GetPointer<const flatbuffers::Vector<int64_t>*>(offset)));
            break;
          }
          [[fallthrough]];
        default:
          issues_->add(path, "{}: internal error: attribute '{}' has a type the loader cannot read", path,
                       field->name);
      }
    }
  }

  void dataset(const fb::Dataset& in, size_t i, Dataset* out) {
    std::string path = fmt::format("datasets[{}]", i), where = label("datasets", i, str(in.name()));
    out->name = str(in.name());
    out->kind = str(in.kind());
    out->images = str(in.images());
    out->labels = str(in.labels());
    out->path = str(in.path());
    integer(in.label_column(), path + ".label_column", where, &out->label_column);
    if (in.header()) out->header = *in.header();
    integer(in.num_samples(), path + ".num_samples", where, &out->num_samples);
    integer(in.num_classes(), path + ".num_classes", where, &out->num_classes);
    out->feature_shape = shape_of(in.feature_shape());
    integer(in.id_fields(), path + ".id_fields", where, &out->id_fields);
    integer(in.id_range(), path + ".id_range", where, &out->id_range);
    integer(in.seed(), path + ".seed", where, &out->seed);
    if (in.scale()) out->scale = static_cast<float>(*in.scale());
    integer(in.context(), path + ".context", where, &out->context);
    if (in.split()) {
      if (in.split()->size() != 2)
        issues_->add(path + ".split", "{}: split has {} numbers; it is [from, to]", where, in.split()->size());
      else {
        out->split_from = in.split()->Get(0);
        out->split_to = in.split()->Get(1);
      }
    }
    std::vector<const fb::InlineTensor*> tensors = items(in.tensors());
    for (size_t t = 0; t < tensors.size(); ++t)
      inline_tensor(*tensors[t], fmt::format("{}.tensors[{}]", path, t),
                    where + ": " + label("tensors", t, str(tensors[t]->name())), &out->tensors.emplace_back());
  }

  void inline_tensor(const fb::InlineTensor& in, const std::string& path, const std::string& where, InlineTensor* out) {
    out->name = str(in.name());
    out->shape = shape_of(in.shape());
    dtype(in.dtype(), path + ".dtype", where, &out->dtype);
    if (in.data() == nullptr) return;
    for (flatbuffers::uoffset_t k = 0; k < in.data()->size(); ++k) {
      double v = in.data()->Get(k);
      switch (out->dtype) {
        case DType::kF32:
          out->f32.push_back(static_cast<float>(v));
          break;
        case DType::kI32:
          if (v != std::trunc(v) || v < std::numeric_limits<int32_t>::min() ||
              v > std::numeric_limits<int32_t>::max()) {
            issues_->add(path + ".data", "{}: data[{}] = {} is not an i32", where, k, v);
            return;
          }
          out->i32.push_back(static_cast<int32_t>(v));
          break;
        case DType::kBF16:
        case DType::kF16:
          issues_->add(path + ".dtype", "{}: an inline tensor holds f32 or i32 values, not {} (a cast op in the job "
                       "makes other dtypes)", where, dtype_name(out->dtype));
          return;
      }
    }
  }

  void input(const fb::Input& in, size_t i, Input* out) {
    std::string path = fmt::format("inputs[{}]", i), where = label("inputs", i, str(in.name()));
    out->name = str(in.name());
    out->dataset = str(in.dataset());
    out->field = str(in.field());
    out->shape = shape_of(in.shape());
    dtype(in.dtype(), path + ".dtype", where, &out->dtype);
    out->sbp = sbp(in.sbp(), path + ".sbp", where);
    out->placement = placement(in.placement(), path + ".placement", where);
    if (in.sequence_axis()) out->sequence_axis = *in.sequence_axis();
  }

  void variable(const fb::Variable& in, const std::string& section, size_t i, Variable* out) {
    std::string path = fmt::format("{}[{}]", section, i), where = label(section, i, str(in.name()));
    out->name = str(in.name());
    out->shape = shape_of(in.shape());
    dtype(in.dtype(), path + ".dtype", where, &out->dtype);
    if (in.init() != nullptr) {
      out->init.type = str(in.init()->type());
      attrs(reinterpret_cast<const flatbuffers::Table*>(in.init()), "Init", "type", path + ".init", &out->init.attrs);
    }
    out->sbp = sbp(in.sbp(), path + ".sbp", where);
    out->placement = placement(in.placement(), path + ".placement", where);
    if (in.trainable()) out->trainable = *in.trainable();
    if (in.sequence_axis()) out->sequence_axis = *in.sequence_axis();
  }

  void op(const fb::Op& in, const std::string& section, size_t i, Op* out) {
    std::string path = fmt::format("{}[{}]", section, i), where = label(section, i, str(in.name()));
    out->name = str(in.name());
    out->type = str(in.type());
    out->inputs = strings_of(in.inputs());
    out->outputs = strings_of(in.outputs());
    if (in.outputs() == nullptr) out->outputs = {out->name};
    attrs(reinterpret_cast<const flatbuffers::Table*>(in.attrs()), "Attrs", "", path + ".attrs", &out->attrs);
    if (in.sbp() != nullptr)
      for (const flatbuffers::String* hint : *in.sbp()) out->output_sbp.push_back(sbp(hint, path + ".sbp", where));
    out->placement = placement(in.placement(), path + ".placement", where);
    out->recompute = str(in.recompute());
  }

  void group(const fb::Group& in, size_t i, Group* out) {
    std::string path = fmt::format("groups[{}]", i), where = label("groups", i, str(in.name()));
    out->name = str(in.name());
    if (auto p = placement(in.placement(), path + ".placement", where)) out->placement = *p;
    out->members = strings_of(in.members());
  }

  void run_config(const fb::Job& in, Job* out) {
    if (const fb::Optimizer* o = in.optimizer()) {
      Optimizer& opt = out->optimizer;
      if (o->type()) opt.type = o->type()->str();
      if (o->lr()) opt.lr = *o->lr();
      if (o->momentum()) opt.momentum = *o->momentum();
      if (o->beta1()) opt.beta1 = *o->beta1();
      if (o->beta2()) opt.beta2 = *o->beta2();
      if (o->epsilon()) opt.epsilon = *o->epsilon();
      if (o->weight_decay()) opt.weight_decay = *o->weight_decay();
      opt.no_decay = strings_of(o->no_decay());
      if (o->clip_grad_norm()) opt.clip_grad_norm = *o->clip_grad_norm();
      integer(o->warmup_steps(), "optimizer.warmup_steps", "optimizer.warmup_steps", &opt.warmup_steps);
      integer(o->decay_steps(), "optimizer.decay_steps", "optimizer.decay_steps", &opt.decay_steps);
      if (o->min_lr()) opt.min_lr = *o->min_lr();
    }
    if (const fb::Train* t = in.train()) {
      TrainConfig& train = out->train;
      integer(t->steps(), "train.steps", "train.steps", &train.steps);
      integer(t->epochs(), "train.epochs", "train.epochs", &train.epochs);
      integer(t->batch_size(), "train.batch_size", "train.batch_size", &train.batch_size);
      integer(t->log_every(), "train.log_every", "train.log_every", &train.log_every);
      integer(t->bucket_bytes(), "train.bucket_bytes", "train.bucket_bytes", &train.bucket_bytes);
      integer(t->micro_batches(), "train.micro_batches", "train.micro_batches", &train.micro_batches);
      integer(t->seed(), "train.seed", "train.seed", &train.seed);
      if (t->shuffle()) train.shuffle = *t->shuffle();
      if (t->zero()) train.zero = *t->zero();
      if (t->allow_tf32()) train.allow_tf32 = *t->allow_tf32();
      if (t->reuse_memory()) train.reuse_memory = *t->reuse_memory();
      if (t->cuda_graphs()) train.cuda_graphs = *t->cuda_graphs();
      if (t->nccl()) train.nccl = *t->nccl();
      if (t->buckets_by_link()) train.buckets_by_link = *t->buckets_by_link();
      if (t->devices()) train.devices = t->devices()->str();
      mode(t->schedule(), "train.schedule", &train.schedule);
      mode(t->view(), "train.view", &train.view);
      mode(t->precision(), "train.precision", &train.precision);
      mode(t->compression(), "train.compression", &train.compression);
      integer(t->compression_rank(), "train.compression_rank", "train.compression_rank", &train.compression_rank);
      integer(t->compression_start_step(), "train.compression_start_step", "train.compression_start_step",
              &train.compression_start_step);
      if (t->loss_scale()) train.loss_scale = *t->loss_scale();
      integer(t->loss_scale_window(), "train.loss_scale_window", "train.loss_scale_window", &train.loss_scale_window);
    }
    if (const fb::Pipeline* p = in.pipeline()) {
      Pipeline pipeline;
      pipeline.stages = strings_of(p->stages());
      integer(p->num_stages(), "pipeline.num_stages", "pipeline.num_stages", &pipeline.num_stages);
      if (p->balance()) pipeline.balance = p->balance()->str();
      out->pipeline = std::move(pipeline);
    }
    if (const fb::Eval* e = in.eval()) {
      Eval eval;
      eval.dataset = str(e->dataset());
      integer(e->batch_size(), "eval.batch_size", "eval.batch_size", &eval.batch_size);
      out->eval = std::move(eval);
    }
    if (const fb::Generate* g = in.generate()) {
      Generate gen;
      gen.input = str(g->input());
      gen.logits = str(g->logits());
      gen.prompt = str(g->prompt());
      if (g->tokenizer()) gen.tokenizer = g->tokenizer()->str();
      if (g->vocab()) gen.vocab = g->vocab()->str();
      integer(g->tokens(), "generate.tokens", "generate.tokens", &gen.tokens);
      if (g->temperature()) gen.temperature = *g->temperature();
      integer(g->top_k(), "generate.top_k", "generate.top_k", &gen.top_k);
      integer(g->seed(), "generate.seed", "generate.seed", &gen.seed);
      out->generate = std::move(gen);
    }
    if (const fb::Distributed* d = in.distributed()) {
      Distributed dist;
      mode(d->mode(), "distributed.mode", &dist.mode);
      if (d->pservers()) {
        std::string entry;
        for (char ch : d->pservers()->str() + ",") {
          if (ch != ',') {
            if (ch != ' ') entry += ch;
            continue;
          }
          if (!entry.empty()) dist.pservers.push_back(entry);
          entry.clear();
        }
      }
      integer(d->trainers(), "distributed.trainers", "distributed.trainers", &dist.trainers);
      if (d->sync_mode()) dist.sync_mode = *d->sync_mode();
      if (d->slice_var_up()) dist.slice_var_up = *d->slice_var_up();
      mode(d->split_method(), "distributed.split_method", &dist.split_method);
      integer(d->min_block_size(), "distributed.min_block_size", "distributed.min_block_size", &dist.min_block_size);
      if (d->enable_dc_asgd()) dist.enable_dc_asgd = *d->enable_dc_asgd();
      if (d->print_log()) dist.print_log = *d->print_log();
      integer(d->rpc_deadline(), "distributed.rpc_deadline", "distributed.rpc_deadline", &dist.rpc_deadline);
      integer(d->rpc_send_thread_num(), "distributed.rpc_send_thread_num", "distributed.rpc_send_thread_num",
              &dist.rpc_send_thread_num);
      integer(d->rpc_get_thread_num(), "distributed.rpc_get_thread_num", "distributed.rpc_get_thread_num",
              &dist.rpc_get_thread_num);
      integer(d->rpc_prefetch_thread_num(), "distributed.rpc_prefetch_thread_num",
              "distributed.rpc_prefetch_thread_num", &dist.rpc_prefetch_thread_num);
      out->distributed = std::move(dist);
    }
    if (const fb::Checkpoint* c = in.checkpoint()) {
      CheckpointConfig& ckpt = out->checkpoint;
      if (c->dir()) ckpt.dir = c->dir()->str();
      integer(c->every(), "checkpoint.every", "checkpoint.every", &ckpt.every);
      integer(c->keep(), "checkpoint.keep", "checkpoint.keep", &ckpt.keep);
      if (c->overwrite()) ckpt.overwrite = *c->overwrite();
      dtype(c->dtype(), "checkpoint.dtype", "checkpoint", &ckpt.dtype);
    }
  }

 private:
  const flatbuffers::Parser& parser_;
  Issues* issues_;
};

}  // namespace

void convert_job(const fb::Job& root, const flatbuffers::Parser& parser, Job* job, Issues* issues, Origins* origins) {
  Converter c(parser, issues);
  if (root.name()) job->name = root.name()->str();
  size_t i = 0;
  for (const fb::Dataset* d : items(root.datasets())) c.dataset(*d, i++, &job->datasets.emplace_back());
  i = 0;
  for (const fb::Input* in : items(root.inputs())) c.input(*in, i++, &job->inputs.emplace_back());
  i = 0;
  for (const fb::Variable* v : items(root.variables())) c.variable(*v, "variables", i++, &job->variables.emplace_back());
  i = 0;
  for (const fb::Op* op : items(root.ops())) c.op(*op, "ops", i++, &job->ops.emplace_back());
  std::vector<Block> blocks;
  i = 0;
  for (const fb::Block* b : items(root.blocks())) {
    Block& block = blocks.emplace_back();
    const std::string path = fmt::format("blocks[{}]", i++);
    block.name = str(b->name());
    if (b->repeat()) block.repeat = *b->repeat();
    block.input = str(b->input());
    block.output = str(b->output());
    block.as = str(b->as());
    if (b->recompute()) block.recompute = *b->recompute();
    size_t k = 0;
    for (const fb::Variable* v : items(b->variables())) c.variable(*v, path + ".variables", k++, &block.variables.emplace_back());
    k = 0;
    for (const fb::Op* op : items(b->ops())) c.op(*op, path + ".ops", k++, &block.ops.emplace_back());
  }
  if (issues->size() == 0) expand_blocks(blocks, job, issues, origins);
  i = 0;
  for (const fb::Group* g : items(root.groups())) c.group(*g, i++, &job->groups.emplace_back());
  if (issues->size() == 0) expand_short_ops(job, issues, origins);
  job->loss = str(root.loss());
  for (const fb::Metric* m : items(root.metrics())) job->metrics.push_back({str(m->name()), str(m->tensor())});
  if (root.fetch() != nullptr)
    for (const flatbuffers::String* name : *root.fetch()) job->fetch.push_back(name->str());
  c.run_config(root, job);
}

}  // namespace rill::graph
