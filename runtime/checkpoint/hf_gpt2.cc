#include "runtime/checkpoint/hf_gpt2.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_io.h"

namespace rill {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One of the job's tensors and its Hugging Face counterpart. A piece of a
// fused tensor (the query, key or value of c_attn) is columns
// [column, column + columns) of it: `columns` of a [rows, 3C] weight or of
// a [3C] bias.
struct Mapping {
  std::string rill, hf;
  Shape shape;          // the job's
  int64_t column = -1;  // >= 0: a third of c_attn
};

std::vector<Mapping> mappings(const Gpt2Layout& g) {
  const int64_t c = g.embd;
  std::vector<Mapping> out = {{"wte", "wte.weight", {g.vocab, c}},
                              {"wpe", "wpe.weight", {g.positions, c}},
                              {"lnf.g", "ln_f.weight", {c}},
                              {"lnf.b", "ln_f.bias", {c}}};
  for (int i = 0; i < g.layers; ++i) {
    const std::string r = fmt::format("h{}.", i), h = fmt::format("h.{}.", i);
    out.push_back({r + "ln1.g", h + "ln_1.weight", {c}});
    out.push_back({r + "ln1.b", h + "ln_1.bias", {c}});
    const char* qkv[] = {"q", "k", "v"};
    for (int part = 0; part < 3; ++part) {
      out.push_back({r + "attn." + qkv[part] + ".w", h + "attn.c_attn.weight", {c, c}, part * c});
      out.push_back({r + "attn." + qkv[part] + ".b", h + "attn.c_attn.bias", {c}, part * c});
    }
    out.push_back({r + "attn.proj.w", h + "attn.c_proj.weight", {c, c}});
    out.push_back({r + "attn.proj.b", h + "attn.c_proj.bias", {c}});
    out.push_back({r + "ln2.g", h + "ln_2.weight", {c}});
    out.push_back({r + "ln2.b", h + "ln_2.bias", {c}});
    out.push_back({r + "mlp.fc.w", h + "mlp.c_fc.weight", {c, 4 * c}});
    out.push_back({r + "mlp.fc.b", h + "mlp.c_fc.bias", {4 * c}});
    out.push_back({r + "mlp.proj.w", h + "mlp.c_proj.weight", {4 * c, c}});
    out.push_back({r + "mlp.proj.b", h + "mlp.c_proj.bias", {c}});
  }
  return out;
}

// Hugging Face's shape of `hf` (a fused c_attn is three of the job's wide).
Shape hf_shape(const Mapping& m, int64_t hf_vocab, int64_t hf_positions) {
  if (m.rill == "wte") return {hf_vocab, m.shape[1]};
  if (m.rill == "wpe") return {hf_positions, m.shape[1]};
  if (m.column < 0) return m.shape;
  return m.shape.size() == 2 ? Shape{m.shape[0], 3 * m.shape[1]} : Shape{3 * m.shape[0]};
}

std::string shape_text(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Rows [0, rows) and columns [from, from + columns) of a row-major [*, width] tensor.
std::vector<float> columns_of(const std::vector<float>& v, int64_t rows, int64_t width, int64_t from,
                              int64_t columns) {
  std::vector<float> out(static_cast<size_t>(rows * columns));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(v.begin() + r * width + from, columns, out.begin() + r * columns);
  return out;
}

}  // namespace

StatusOr<Gpt2Layout> gpt2_layout(const graph::Job& job) {
  std::map<std::string, Shape> vars;
  for (const graph::Variable& v : job.variables) vars[v.name] = v.shape;
  Gpt2Layout g;
  auto wte = vars.find("wte"), wpe = vars.find("wpe");
  if (wte == vars.end() || wte->second.size() != 2 || wpe == vars.end() || wpe->second.size() != 2)
    return invalid_argument("job '{}' is not GPT-2's architecture in Rill's names: it needs variables wte [vocab, C] "
                            "and wpe [positions, C] (as samples/gpt/gpt_moby.json)",
                            job.name);
  g.vocab = wte->second[0];
  g.embd = static_cast<int>(wte->second[1]);
  g.positions = wpe->second[0];
  while (vars.count(fmt::format("h{}.ln1.g", g.layers))) ++g.layers;
  if (g.layers == 0) return invalid_argument("job '{}' has no block h0 (no variable h0.ln1.g)", job.name);
  std::set<std::string> expected;
  for (const Mapping& m : mappings(g)) {
    expected.insert(m.rill);
    auto it = vars.find(m.rill);
    if (it == vars.end())
      return invalid_argument("job '{}' has no variable '{}', which GPT-2's {} needs (shape {})", job.name, m.rill,
                              m.hf, shape_text(m.shape));
    if (it->second != m.shape)
      return invalid_argument("job '{}': variable '{}' is {}; GPT-2 with {} wide layers needs {}", job.name, m.rill,
                              shape_text(it->second), g.embd, shape_text(m.shape));
  }
  for (const auto& [name, shape] : vars)
    if (!expected.count(name))
      return invalid_argument("job '{}': variable '{}' has no counterpart in GPT-2", job.name, name);
  // Heads: the 4-d reshape of block 0's queries, written out ("h0.q2":
  // [-1, T, H, D]) or made by attention's `heads` ("h0.y.q_split":
  // [0, 0, H, -1]).
  for (const graph::Op& op : job.ops) {
    const bool queries = op.name.rfind("h0.q", 0) == 0 || (op.name.rfind("h0.", 0) == 0 && op.name.ends_with(".q_split"));
    if (g.heads == 0 && op.type == "reshape" && queries) {
      const auto shape = op.attrs.get_ints("shape");
      const bool whole = shape.size() == 4 && shape[2] > 0 &&
                         (shape[3] == -1 ? g.embd % shape[2] == 0 : shape[2] * shape[3] == g.embd);
      if (whole) g.heads = static_cast<int>(shape[2]);
    }
    if (g.heads > 0) break;
  }
  if (g.heads <= 0 || g.embd % g.heads != 0)
    return invalid_argument("job '{}': cannot tell its attention heads (no 4-d reshape of block 0's queries, "
                            "written out or made by attention's `heads`)",
                            job.name);
  return g;
}

Status import_hf_gpt2(const std::string& from, const graph::Job& job, const std::string& to, std::string* out) {
  RILL_ASSIGN_OR_RETURN(Gpt2Layout g, gpt2_layout(job));
  std::error_code ec;
  const bool folder = fs::is_directory(from, ec);
  const std::string file = folder ? (fs::path(from) / "model.safetensors").string() : from;
  if (folder && !fs::exists(file, ec)) {
    if (fs::exists(fs::path(from) / "pytorch_model.bin", ec))
      return invalid_argument("{} holds pytorch_model.bin (a pickle, which Rill does not load) but no "
                              "model.safetensors: save the model with safe_serialization=True",
                              from);
    return Status(Code::kNotFound, fmt::format("{} has no model.safetensors", from));
  }
  Checkpoint hf;
  RILL_RETURN_IF_ERROR(checkpoint_io::read_safetensors(file, &hf, FileAccess{}));
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const CheckpointTensor& t : hf.tensors) {
    std::string name = t.name;
    if (name.rfind("transformer.", 0) == 0) name = name.substr(12);
    if (!by_name.emplace(name, &t).second)
      return invalid_argument("{}: '{}' is there twice (with and without 'transformer.')", file, name);
  }
  // config.json, when there, must be of this architecture.
  const fs::path config_path = folder ? fs::path(from) / "config.json" : fs::path(from).parent_path() / "config.json";
  if (fs::exists(config_path, ec)) {
    auto text = checkpoint_io::read_small_file(config_path.string(), 1 << 20, FileAccess{});
    if (!text.ok()) return text.status();
    json config = json::parse(*text, nullptr, false);
    if (!config.is_object()) return invalid_argument("{}: not a JSON object", config_path.string());
    for (const auto& [key, want] : {std::pair<const char*, int64_t>{"n_layer", g.layers}, {"n_embd", g.embd},
                                    {"n_head", g.heads}})
      if (config.contains(key) && config[key] != want)
        return invalid_argument("{}: {} is {}, the job's {}", config_path.string(), key, config[key].dump(), want);
  }
  auto wte_hf = by_name.find("wte.weight"), wpe_hf = by_name.find("wpe.weight");
  if (wte_hf == by_name.end() || wpe_hf == by_name.end())
    return invalid_argument("{}: no {}", file, wte_hf == by_name.end() ? "wte.weight" : "wpe.weight");
  const int64_t hf_vocab = wte_hf->second->shape.empty() ? 0 : wte_hf->second->shape[0];
  const int64_t hf_positions = wpe_hf->second->shape.empty() ? 0 : wpe_hf->second->shape[0];
  if (hf_vocab > g.vocab)
    return invalid_argument("{}: wte has {} rows, more than the job's wte ({})", file, hf_vocab, g.vocab);
  if (hf_positions < g.positions)
    return invalid_argument("{}: wpe has {} positions, fewer than the job's context ({})", file, hf_positions,
                            g.positions);
  Checkpoint ckpt;
  ckpt.step = 0;
  ckpt.job = job.name;
  std::set<std::string> used;
  for (const Mapping& m : mappings(g)) {
    auto it = by_name.find(m.hf);
    if (it == by_name.end()) return invalid_argument("{}: no '{}' (the job's '{}')", file, m.hf, m.rill);
    const CheckpointTensor& t = *it->second;
    const Shape want = hf_shape(m, hf_vocab, hf_positions);
    if (t.shape != want)
      return invalid_argument("{}: '{}' is {}; the job's '{}' needs {}", file, m.hf, shape_text(t.shape), m.rill,
                              shape_text(want));
    used.insert(m.hf);
    CheckpointTensor v{m.rill, m.shape, {}, DType::kF32};
    if (m.column >= 0) {
      v.values = m.shape.size() == 2 ? columns_of(t.values, m.shape[0], 3 * m.shape[1], m.column, m.shape[1])
                                     : columns_of(t.values, 1, 3 * m.shape[0], m.column, m.shape[0]);
    } else if (m.rill == "wte" || m.rill == "wpe") {
      v.values.assign(static_cast<size_t>(m.shape[0] * m.shape[1]), 0.0f);  // wte's padded rows stay zero
      const int64_t rows = std::min(m.shape[0], t.shape[0]);
      std::copy_n(t.values.begin(), rows * m.shape[1], v.values.begin());
    } else {
      v.values = t.values;
    }
    ckpt.tensors.push_back(std::move(v));
  }
  for (const auto& [name, t] : by_name) {
    if (used.count(name)) continue;
    const bool buffer = name.size() > 9 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
    if (buffer) continue;
    if (name == "lm_head.weight") {
      if (t->values != wte_hf->second->values)
        return invalid_argument("{}: lm_head.weight differs from wte.weight: an untied head is not GPT-2's", file);
      continue;
    }
    return invalid_argument("{}: unknown tensor '{}' (not GPT-2's)", file, name);
  }
  RILL_RETURN_IF_ERROR(write_checkpoint(to, ckpt, 1));
  if (out)
    *out = fmt::format("{}: GPT-2 of {} layers, {} wide, {} heads ({} x {} wte{}, {} positions{}) -> {} (step 0, {} "
                       "variables)",
                       file, g.layers, g.embd, g.heads, hf_vocab, g.embd,
                       hf_vocab < g.vocab ? fmt::format(", rows to {} zero", g.vocab) : "", hf_positions,
                       hf_positions > g.positions ? fmt::format(", the first {} kept", g.positions) : "", to,
                       ckpt.tensors.size());
  return {};
}

Status export_hf_gpt2(const std::string& from, const graph::Job& job, const std::string& to, int64_t vocab,
                      std::string* out) {
  RILL_ASSIGN_OR_RETURN(Gpt2Layout g, gpt2_layout(job));
  if (vocab <= 0) vocab = g.vocab;
  if (vocab > g.vocab)
    return invalid_argument("--vocab {}: the job's wte has {} rows", vocab, g.vocab);
  RILL_ASSIGN_OR_RETURN(Checkpoint ckpt, read_checkpoint(from));
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const CheckpointTensor& t : ckpt.tensors) by_name[t.name] = &t;
  std::map<std::string, CheckpointTensor> hf;  // by Hugging Face's name
  for (const Mapping& m : mappings(g)) {
    auto it = by_name.find(m.rill);
    if (it == by_name.end())
      return invalid_argument("checkpoint {} (job '{}') has no '{}'", from, ckpt.job, m.rill);
    const CheckpointTensor& t = *it->second;
    if (t.shape != m.shape)
      return invalid_argument("checkpoint {}: '{}' is {}, the job's {}", from, m.rill, shape_text(t.shape),
                              shape_text(m.shape));
    const std::string name = "transformer." + m.hf;
    CheckpointTensor& h = hf[name];
    h.name = name;
    h.shape = hf_shape(m, vocab, g.positions);
    if (m.column >= 0) {
      const int64_t rows = m.shape.size() == 2 ? m.shape[0] : 1, width = m.shape.back();
      h.values.resize(static_cast<size_t>(rows * 3 * width));
      for (int64_t r = 0; r < rows; ++r)
        std::copy_n(t.values.begin() + r * width, width, h.values.begin() + r * 3 * width + m.column);
    } else {
      h.values.assign(t.values.begin(), t.values.begin() + num_elements(h.shape));
    }
  }
  std::vector<CheckpointTensor> tensors;
  for (auto& [name, t] : hf) tensors.push_back(std::move(t));
  std::error_code made;
  fs::create_directories(to, made);
  if (made || !fs::is_directory(to, made))
    return Status(Code::kUnavailable, fmt::format("cannot make the folder '{}'{}", to,
                                                  made ? ": " + made.message() : ": it is a file"));
  RILL_RETURN_IF_ERROR(checkpoint_io::write_safetensors((fs::path(to) / "model.safetensors").string(), tensors,
                                                       {{"format", "pt"}}));
  json config = {{"architectures", {"GPT2LMHeadModel"}},
                 {"model_type", "gpt2"},
                 {"vocab_size", vocab},
                 {"n_positions", g.positions},
                 {"n_ctx", g.positions},
                 {"n_embd", g.embd},
                 {"n_layer", g.layers},
                 {"n_head", g.heads},
                 {"n_inner", nullptr},
                 {"activation_function", "gelu_new"},
                 {"layer_norm_epsilon", 1e-5},
                 {"resid_pdrop", 0.0},
                 {"embd_pdrop", 0.0},
                 {"attn_pdrop", 0.0},
                 {"tie_word_embeddings", true}};
  if (vocab > 50256) config["bos_token_id"] = config["eos_token_id"] = 50256;
  const std::string config_text = config.dump(2) + "\n";
  RILL_RETURN_IF_ERROR(checkpoint_io::write_file_synced((fs::path(to) / "config.json").string(),
                                                         {{config_text.data(), config_text.size()}}));
  if (out)
    *out = fmt::format("{} (step {}, job '{}') -> {}/model.safetensors and config.json: GPT-2 of {} layers, {} wide, "
                       "{} heads, vocabulary {}, {} positions",
                       from, ckpt.step, ckpt.job, to, g.layers, g.embd, g.heads, vocab, g.positions);
  return {};
}

}  // namespace rill
