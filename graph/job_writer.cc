// job_to_json: a graph::Job written back as a job file. The file is built as a
// small tree of JSON values (scalars already rendered), then laid out: a
// container that fits on its line is written on one line, as in the sample
// job files; a longer one is broken up, number lists packed to the width.
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <flatbuffers/idl.h>
#include <flatbuffers/util.h>

#include "graph/check_util.h"
#include "graph/job_file.h"
#include "graph/job_schema_text.h"

namespace rill::graph {
namespace {

constexpr size_t kWidth = 100;

struct Node {
  enum Kind : uint8_t { kScalar, kArray, kObject };
  Kind kind = kScalar;
  std::string text;                                   // kScalar: the rendered value
  std::vector<std::string> keys;  // kObject: quoted keys, the values in `items`
  std::vector<Node> items;        // kArray: the items; kObject: the values

  static Node scalar(std::string text) { return {kScalar, std::move(text), {}, {}}; }
  static Node array() { return {kArray, {}, {}, {}}; }
  static Node object() { return {kObject, {}, {}, {}}; }
  Node& add(std::string_view key, Node value) {
    keys.push_back(fmt::format("\"{}\"", key));
    items.push_back(std::move(value));
    return *this;
  }
};

// ---- layout ----

// The one-line length of `n`, or a number above `limit` once it is clear it
// will not fit (so a large tensor is not measured in full at every level).
size_t compact_size(const Node& n, size_t limit) {
  if (n.kind == Node::kScalar) return n.text.size();
  size_t size = 2;
  for (const Node& item : n.items) {
    size += compact_size(item, limit) + 2;
    if (size > limit) return size;
  }
  for (const std::string& key : n.keys) size += key.size() + 2;
  return size - (n.items.empty() ? 0 : 2);
}

void write_compact(const Node& n, std::string* out) {
  if (n.kind == Node::kScalar) {
    *out += n.text;
    return;
  }
  *out += n.kind == Node::kArray ? '[' : '{';
  for (size_t i = 0; i < n.items.size(); ++i) {
    if (i > 0) *out += ", ";
    if (n.kind == Node::kObject) *out += n.keys[i] + ": ";
    write_compact(n.items[i], out);
  }
  *out += n.kind == Node::kArray ? ']' : '}';
}

// Writes `n` whose first character goes at `column`, its closing bracket
// indented by `indent`. One column is kept free for a following comma.
void write_node(const Node& n, size_t indent, size_t column, bool expand, std::string* out) {
  if (n.kind == Node::kScalar || (!expand && column + compact_size(n, kWidth) + 1 <= kWidth)) {
    write_compact(n, out);
    return;
  }
  std::string pad(indent + 2, ' ');
  if (n.kind == Node::kObject) {
    *out += "{\n";
    for (size_t i = 0; i < n.items.size(); ++i) {
      *out += pad + n.keys[i] + ": ";
      write_node(n.items[i], indent + 2, indent + 4 + n.keys[i].size(), false, out);
      *out += i + 1 < n.items.size() ? ",\n" : "\n";
    }
    out->append(indent, ' ').append("}");
    return;
  }
  bool scalars = true;
  for (const Node& item : n.items) scalars = scalars && item.kind == Node::kScalar;
  out->append("[\n").append(pad);
  size_t line = pad.size();
  for (size_t i = 0; i < n.items.size(); ++i) {
    const Node& item = n.items[i];
    bool last = i + 1 == n.items.size();
    if (i > 0 && (!scalars || line + item.text.size() + 2 > kWidth)) {  // a space before, a comma after
      out->append("\n").append(pad);
      line = pad.size();
    } else if (i > 0) {
      *out += ' ';
      ++line;
    }
    size_t before = out->size();
    write_node(item, indent + 2, line, false, out);
    if (!last) *out += ',';
    line += out->size() - before;
  }
  out->append("\n").append(indent, ' ').append("]");
}

// ---- values ----

class Writer {
 public:
  explicit Writer(const flatbuffers::Parser& schema) : schema_(schema) {}

  const Status& status() const { return error_; }

  Node job(const Job& job) {
    Node root = Node::object();
    root.add("name", str(job.name, "name"));
    Node datasets = Node::array(), inputs = Node::array(), variables = Node::array(), ops = Node::array();
    for (size_t i = 0; i < job.datasets.size(); ++i) datasets.items.push_back(dataset(job.datasets[i], i));
    for (size_t i = 0; i < job.inputs.size(); ++i) inputs.items.push_back(input(job.inputs[i], i));
    for (size_t i = 0; i < job.variables.size(); ++i) variables.items.push_back(variable(job.variables[i], i));
    for (size_t i = 0; i < job.ops.size(); ++i) ops.items.push_back(op(job.ops[i], i));
    root.add("datasets", std::move(datasets)).add("inputs", std::move(inputs));
    root.add("variables", std::move(variables)).add("ops", std::move(ops));
    if (!job.groups.empty()) {
      Node groups = Node::array();
      for (size_t i = 0; i < job.groups.size(); ++i) groups.items.push_back(group(job.groups[i], i));
      root.add("groups", std::move(groups));
    }
    root.add("loss", str(job.loss, "loss"));
    if (!job.metrics.empty()) {
      Node metrics = Node::array();
      for (size_t i = 0; i < job.metrics.size(); ++i) {
        std::string where = check::label("metrics", i, job.metrics[i].name);
        metrics.items.push_back(Node::object()
                                    .add("name", str(job.metrics[i].name, where + ": name"))
                                    .add("tensor", str(job.metrics[i].tensor, where + ": tensor")));
      }
      root.add("metrics", std::move(metrics));
    }
    if (!job.fetch.empty()) {
      Node fetch = Node::array();
      for (size_t i = 0; i < job.fetch.size(); ++i)
        fetch.items.push_back(str(job.fetch[i], fmt::format("fetch[{}]", i)));
      root.add("fetch", std::move(fetch));
    }
    if (job.pipeline) {
      Node pipeline = Node::object();
      if (!job.pipeline->stages.empty()) {
        Node stages = Node::array();
        for (size_t i = 0; i < job.pipeline->stages.size(); ++i)
          stages.items.push_back(str(job.pipeline->stages[i], fmt::format("pipeline.stages[{}]", i)));
        pipeline.add("stages", std::move(stages));
      }
      if (job.pipeline->num_stages != 0) pipeline.add("num_stages", number(job.pipeline->num_stages));
      pipeline.add("balance", str(job.pipeline->balance, "pipeline.balance"));
      root.add("pipeline", std::move(pipeline));
    }
    root.add("optimizer", optimizer(job.optimizer));
    root.add("train", train(job.train));
    if (job.eval)
      root.add("eval", Node::object()
                           .add("dataset", str(job.eval->dataset, "eval.dataset"))
                           .add("batch_size", number(job.eval->batch_size)));
    if (job.generate) {
      const Generate& g = *job.generate;
      Node gen = Node::object();
      gen.add("input", str(g.input, "generate.input")).add("logits", str(g.logits, "generate.logits"));
      if (!g.prompt.empty()) gen.add("prompt", str(g.prompt, "generate.prompt"));
      if (g.tokenizer != Generate{}.tokenizer) gen.add("tokenizer", str(g.tokenizer, "generate.tokenizer"));
      if (g.vocab != Generate{}.vocab) gen.add("vocab", str(g.vocab, "generate.vocab"));
      gen.add("tokens", number(g.tokens)).add("temperature", number(g.temperature)).add("top_k", number(g.top_k));
      gen.add("seed", number(g.seed));
      root.add("generate", std::move(gen));
    }
    if (job.checkpoint != CheckpointConfig{}) {  // absent from a job that saves nothing
      Node checkpoint = Node::object()
                            .add("dir", str(job.checkpoint.dir, "checkpoint.dir"))
                            .add("every", number(job.checkpoint.every))
                            .add("keep", number(int64_t{job.checkpoint.keep}));
      if (job.checkpoint.overwrite) checkpoint.add("overwrite", Node::scalar("true"));
      if (job.checkpoint.dtype != DType::kF32) checkpoint.add("dtype", str(dtype_name(job.checkpoint.dtype), "checkpoint.dtype"));
      root.add("checkpoint", std::move(checkpoint));
    }
    if (job.distributed) {
      const Distributed& d = *job.distributed;
      auto flag = [](bool b) { return Node::scalar(b ? "true" : "false"); };
      std::string pservers;
      for (const std::string& p : d.pservers) pservers += (pservers.empty() ? "" : ",") + p;
      root.add("distributed", Node::object()
                                  .add("mode", word(d.mode))
                                  .add("pservers", str(pservers, "distributed.pservers"))
                                  .add("trainers", number(d.trainers))
                                  .add("sync_mode", flag(d.sync_mode))
                                  .add("slice_var_up", flag(d.slice_var_up))
                                  .add("split_method", word(d.split_method))
                                  .add("min_block_size", number(d.min_block_size))
                                  .add("enable_dc_asgd", flag(d.enable_dc_asgd))
                                  .add("print_log", flag(d.print_log))
                                  .add("rpc_deadline", number(d.rpc_deadline))
                                  .add("rpc_send_thread_num", number(d.rpc_send_thread_num))
                                  .add("rpc_get_thread_num", number(d.rpc_get_thread_num))
                                  .add("rpc_prefetch_thread_num", number(d.rpc_prefetch_thread_num)));
    }
    return root;
  }

 private:
  template <typename... Args>
  void fail(fmt::format_string<Args...> format, Args&&... args) {
    if (error_.ok()) error_ = invalid_argument(format, std::forward<Args>(args)...);
  }

  static Node number(int64_t v) { return Node::scalar(fmt::format("{}", v)); }

  // The parser reads these identifiers as the non-finite values.
  static std::optional<Node> non_finite(double v) {
    if (std::isnan(v)) return Node::scalar("nan");
    if (std::isinf(v)) return Node::scalar(v > 0 ? "inf" : "-inf");
    return std::nullopt;
  }

  // The shortest text that reads back as `v`.
  static Node number(double v) {
    if (auto special = non_finite(v)) return *special;
    return Node::scalar(fmt::format("{}", v));
  }

  // A float is read as a double and narrowed: its shortest text is kept only
  // if that path gives it back, else 9 digits, which always do.
  static Node f32(float v) {
    if (auto special = non_finite(v)) return *special;
    std::string text = fmt::format("{}", v);
    double back = 0;
    std::from_chars(text.data(), text.data() + text.size(), back);
    if (static_cast<float>(back) != v) text = fmt::format("{:.9g}", v);
    return Node::scalar(std::move(text));
  }

  Node seed(uint64_t v, const std::string& where) {
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("{}: {} is above 2^63-1, the largest seed a job file holds", where, v);
    return number(static_cast<int64_t>(v));
  }

  static Node ints(const std::vector<int64_t>& values) {
    Node list = Node::array();
    for (int64_t v : values) list.items.push_back(number(v));
    return list;
  }

  // A JSON string; the parser accepts only UTF-8 text.
  // A mode's word (graph/job_modes.h).
  template <typename E>
  static Node word(E mode) {
    return Node::scalar(fmt::format("\"{}\"", to_string(mode)));
  }

  Node str(const std::string& s, const std::string& where) {
    for (const char* p = s.c_str(); p < s.c_str() + s.size();) {
      if (flatbuffers::FromUTF8(&p) < 0) {
        fail("{}: the text is not valid UTF-8, which job files require", where);
        return Node::scalar("\"\"");
      }
    }
    std::string out = "\"";
    for (char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20)
            out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
          else
            out += c;
      }
    }
    return Node::scalar(out + "\"");
  }

  Node dtype(DType dtype, const std::string& where) {
    DType back;
    if (!parse_dtype(dtype_name(dtype), &back) || back != dtype)
      fail("{}: dtype {} has no name in job files", where, static_cast<int>(dtype));
    return Node::scalar(fmt::format("\"{}\"", dtype_name(dtype)));
  }

  Node sbp(const std::optional<NdSbp>& sbp, const std::string& where) {
    if (!sbp) return Node::scalar("\"\"");
    std::string text = sbp->to_string();
    NdSbp back;
    if (!parse_nd_sbp(text, &back) || !(back == *sbp))
      fail("{}: SBP {} cannot be written; job files hold S(0) to S(9), B and P", where, text);
    return Node::scalar(fmt::format("\"{}\"", text));
  }

  // Adds `attrs` to `object` as the fields of schema table `table` (but
  // `skip`), each in the type the loader reads it back as (graph/job_convert.cc):
  // bool and long fields as int64, double fields as double, [long] as a list.
  void attrs(const Attrs& attrs, const char* table, std::string_view skip, const std::string& where, Node* object) {
    const flatbuffers::StructDef* def = schema_.structs_.Lookup(std::string("rill.graph.fb.") + table);
    if (def == nullptr) {
      error_ = internal_error("graph/job.fbs has no table {}", table);
      return;
    }
    static constexpr const char* kKinds[] = {"an int", "a float", "a string", "an int list"};
    for (const auto& [name, value] : attrs.values()) {
      const flatbuffers::FieldDef* field = name == skip ? nullptr : def->fields.Lookup(name);
      if (field == nullptr) {
        std::vector<std::string> known;
        for (const flatbuffers::FieldDef* f : def->fields.vec)
          if (f->name != skip) known.push_back(f->name);
        fail("{}: attribute '{}' cannot be written: job files have no such attribute (known: {})", where, name,
             check::name_list(known, known.size()));
        continue;
      }
      const flatbuffers::Type& type = field->value.type;
      const char* wanted = nullptr;
      switch (type.base_type) {
        case flatbuffers::BASE_TYPE_BOOL:
          if (const int64_t* v = std::get_if<int64_t>(&value); v != nullptr && (*v == 0 || *v == 1))
            object->add(name, Node::scalar(*v != 0 ? "true" : "false"));
          else
            wanted = "a bool (the int 0 or 1)";
          break;
        case flatbuffers::BASE_TYPE_LONG:
          if (const int64_t* v = std::get_if<int64_t>(&value)) object->add(name, number(*v));
          else wanted = kKinds[0];
          break;
        case flatbuffers::BASE_TYPE_DOUBLE:
          if (const double* v = std::get_if<double>(&value)) object->add(name, number(*v));
          else wanted = kKinds[1];
          break;
        case flatbuffers::BASE_TYPE_STRING:
          if (const std::string* v = std::get_if<std::string>(&value))
            object->add(name, str(*v, fmt::format("{}: attribute '{}'", where, name)));
          else
            wanted = kKinds[2];
          break;
        default:
          if (type.base_type == flatbuffers::BASE_TYPE_VECTOR && type.element == flatbuffers::BASE_TYPE_LONG) {
            if (const auto* v = std::get_if<std::vector<int64_t>>(&value)) object->add(name, ints(*v));
            else wanted = kKinds[3];
          } else {
            error_ = internal_error("graph/job.fbs: {}.{} has a type job_to_json cannot write", table, name);
          }
      }
      if (wanted != nullptr)
        fail("{}: attribute '{}' is {} but job files hold it as {}, so it would not read back the same", where,
             name, kKinds[value.index()], wanted);
    }
  }

  Node dataset(const Dataset& d, size_t i) {
    const Dataset defaults;
    std::string where = check::label("datasets", i, d.name);
    Node out = Node::object();
    out.add("name", str(d.name, where + ": name")).add("kind", str(d.kind, where + ": kind"));
    if (d.images != defaults.images) out.add("images", str(d.images, where + ": images"));
    if (d.labels != defaults.labels) out.add("labels", str(d.labels, where + ": labels"));
    if (d.path != defaults.path) out.add("path", str(d.path, where + ": path"));
    if (d.label_column != defaults.label_column) out.add("label_column", number(int64_t{d.label_column}));
    if (d.header != defaults.header) out.add("header", Node::scalar(d.header ? "true" : "false"));
    if (d.num_samples != defaults.num_samples) out.add("num_samples", number(d.num_samples));
    if (d.num_classes != defaults.num_classes) out.add("num_classes", number(int64_t{d.num_classes}));
    if (!d.feature_shape.empty()) out.add("feature_shape", ints(d.feature_shape));
    if (d.id_fields != defaults.id_fields) out.add("id_fields", number(d.id_fields));
    if (d.id_range != defaults.id_range) out.add("id_range", number(d.id_range));
    if (d.seed != defaults.seed) out.add("seed", seed(d.seed, where + ": seed"));
    if (d.scale != defaults.scale) out.add("scale", f32(d.scale));
    if (d.context != defaults.context) out.add("context", number(d.context));
    if (d.split_from != defaults.split_from || d.split_to != defaults.split_to) {
      Node split = Node::array();
      split.items.push_back(number(d.split_from));
      split.items.push_back(number(d.split_to));
      out.add("split", std::move(split));
    }
    if (!d.tensors.empty()) {
      Node tensors = Node::array();
      for (size_t t = 0; t < d.tensors.size(); ++t) {
        std::string tensor_where = where + ": " + check::label("tensors", t, d.tensors[t].name);
        tensors.items.push_back(inline_tensor(d.tensors[t], tensor_where));
      }
      out.add("tensors", std::move(tensors));
    }
    return out;
  }

  Node inline_tensor(const InlineTensor& t, const std::string& where) {
    Node out = Node::object();
    out.add("name", str(t.name, where + ": name")).add("shape", ints(t.shape));
    if (t.dtype != DType::kF32) out.add("dtype", dtype(t.dtype, where));
    Node data = Node::array();
    if (t.held_by_other_dtypes() != 0)
      fail("{}: its dtype is {}, but it holds values of another dtype ({} of them)", where, dtype_name(t.dtype),
           t.held_by_other_dtypes());
    switch (t.dtype) {
      case DType::kF32:
        for (float v : t.f32) data.items.push_back(f32(v));
        break;
      case DType::kI32:
        for (int32_t v : t.i32) data.items.push_back(number(int64_t{v}));
        break;
      case DType::kBF16:
      case DType::kF16:
        fail("{}: an inline tensor holds f32 or i32 values, not {}", where, dtype_name(t.dtype));
    }
    return out.add("data", std::move(data));
  }

  Node input(const Input& in, size_t i) {
    std::string where = check::label("inputs", i, in.name);
    Node out = Node::object();
    out.add("name", str(in.name, where + ": name")).add("dataset", str(in.dataset, where + ": dataset"));
    out.add("field", str(in.field, where + ": field")).add("shape", ints(in.shape));
    if (in.dtype != DType::kF32) out.add("dtype", dtype(in.dtype, where));
    if (in.sbp) out.add("sbp", sbp(in.sbp, where));
    if (in.placement) out.add("placement", placement(*in.placement, where));
    if (in.sequence_axis) out.add("sequence_axis", number(*in.sequence_axis));
    return out;
  }

  Node variable(const Variable& v, size_t i) {
    std::string where = check::label("variables", i, v.name);
    Node out = Node::object();
    out.add("name", str(v.name, where + ": name")).add("shape", ints(v.shape));
    if (v.dtype != DType::kF32) out.add("dtype", dtype(v.dtype, where));
    Node init = Node::object();
    init.add("type", str(v.init.type, where + ": init type"));
    attrs(v.init.attrs, "Init", "type", where + ": init", &init);
    out.add("init", std::move(init));
    if (v.sbp) out.add("sbp", sbp(v.sbp, where));
    if (!v.trainable) out.add("trainable", Node::scalar("false"));
    if (v.placement) out.add("placement", placement(*v.placement, where));
    if (v.sequence_axis) out.add("sequence_axis", number(*v.sequence_axis));
    return out;
  }

  Node op(const Op& op, size_t i) {
    std::string where = check::label("ops", i, op.name);
    Node out = Node::object();
    out.add("name", str(op.name, where + ": name")).add("type", str(op.type, where + ": type"));
    Node inputs = Node::array(), outputs = Node::array();
    for (const std::string& name : op.inputs) inputs.items.push_back(str(name, where + ": input"));
    out.add("inputs", std::move(inputs));
    if (op.outputs != std::vector<std::string>{op.name}) {  // an absent list means the op's name
      for (const std::string& name : op.outputs) outputs.items.push_back(str(name, where + ": output"));
      out.add("outputs", std::move(outputs));
    }
    if (!op.attrs.values().empty()) {
      Node attributes = Node::object();
      attrs(op.attrs, "Attrs", "", fmt::format("{} of type '{}'", where, op.type), &attributes);
      out.add("attrs", std::move(attributes));
    }
    if (!op.output_sbp.empty()) {
      Node hints = Node::array();
      for (const std::optional<NdSbp>& hint : op.output_sbp) hints.items.push_back(sbp(hint, where));
      out.add("sbp", std::move(hints));
    }
    if (op.placement) out.add("placement", placement(*op.placement, where));
    if (!op.recompute.empty()) out.add("recompute", str(op.recompute, where + ": recompute"));
    return out;
  }

  Node group(const Group& g, size_t i) {
    std::string where = check::label("groups", i, g.name);
    Node out = Node::object();
    out.add("name", str(g.name, where + ": name")).add("placement", placement(g.placement, where));
    Node members = Node::array();
    for (const std::string& name : g.members) members.items.push_back(str(name, where + ": member"));
    out.add("members", std::move(members));
    return out;
  }

  Node placement(const Placement& p, const std::string& where) {
    const std::string text = p.to_string();
    auto back = parse_placement(text);
    if (!back.ok() || !(*back == p)) fail("{}: placement {} does not read back", where, text);
    return str(text, where + ": placement");
  }

  Node optimizer(const Optimizer& o) {
    const Optimizer defaults;
    Node out = Node::object();
    out.add("type", str(o.type, "optimizer.type")).add("lr", number(o.lr));
    // The parameters of the named type are written even at their defaults.
    if (o.type == "momentum" || o.momentum != defaults.momentum) out.add("momentum", number(o.momentum));
    bool adam = o.type == "adam" || o.type == "adamw";
    if (adam || o.beta1 != defaults.beta1) out.add("beta1", number(o.beta1));
    if (adam || o.beta2 != defaults.beta2) out.add("beta2", number(o.beta2));
    if (adam || o.epsilon != defaults.epsilon) out.add("epsilon", number(o.epsilon));
    if (o.weight_decay != defaults.weight_decay) out.add("weight_decay", number(o.weight_decay));
    if (!o.no_decay.empty()) {
      Node patterns = Node::array();
      for (size_t i = 0; i < o.no_decay.size(); ++i)
        patterns.items.push_back(str(o.no_decay[i], fmt::format("optimizer.no_decay[{}]", i)));
      out.add("no_decay", std::move(patterns));
    }
    if (o.clip_grad_norm != defaults.clip_grad_norm) out.add("clip_grad_norm", number(o.clip_grad_norm));
    if (o.warmup_steps != defaults.warmup_steps) out.add("warmup_steps", number(o.warmup_steps));
    if (o.decay_steps != defaults.decay_steps) out.add("decay_steps", number(o.decay_steps));
    if (o.min_lr != defaults.min_lr) out.add("min_lr", number(o.min_lr));
    return out;
  }

  Node train(const TrainConfig& t) {
    return Node::object()
        .add("steps", number(t.steps))
        .add("epochs", number(t.epochs))
        .add("batch_size", number(t.batch_size))
        .add("log_every", number(t.log_every))
        .add("bucket_bytes", number(t.bucket_bytes))
        .add("buckets_by_link", Node::scalar(t.buckets_by_link ? "true" : "false"))
        .add("micro_batches", number(t.micro_batches))
        .add("schedule", word(t.schedule))
        .add("view", word(t.view))
        .add("seed", seed(t.seed, "train.seed"))
        .add("shuffle", Node::scalar(t.shuffle ? "true" : "false"))
        .add("zero", Node::scalar(t.zero ? "true" : "false"))
        .add("allow_tf32", Node::scalar(t.allow_tf32 ? "true" : "false"))
        .add("precision", word(t.precision))
        .add("compression", word(t.compression))
        .add("compression_rank", number(t.compression_rank))
        .add("compression_start_step", number(t.compression_start_step))
        .add("loss_scale", number(t.loss_scale))
        .add("loss_scale_window", number(t.loss_scale_window))
        .add("reuse_memory", Node::scalar(t.reuse_memory ? "true" : "false"))
        .add("cuda_graphs", Node::scalar(t.cuda_graphs ? "true" : "false"))
        .add("nccl", Node::scalar(t.nccl ? "true" : "false"))
        .add("devices", str(t.devices, "train.devices"));
  }

  const flatbuffers::Parser& schema_;
  Status error_;
};

}  // namespace

StatusOr<std::string> job_to_json(const Job& job) {
  flatbuffers::Parser schema;
  if (!schema.Parse(kJobSchemaText)) return internal_error("graph/job.fbs does not parse: {}", schema.error_);
  Writer writer(schema);
  Node root = writer.job(job);
  if (!writer.status().ok()) return writer.status().with_context(fmt::format("writing job '{}'", job.name));
  std::string out;
  write_node(root, 0, 0, true, &out);
  return out + "\n";
}

}  // namespace rill::graph
