#include "graph/job_blocks.h"

#include <algorithm>
#include <set>

#include "kernels/op.h"

namespace rill::graph {
namespace {

constexpr int64_t kSeedStridePerLayer = 1000;
constexpr int64_t kMaxLayers = 10000;

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

struct Layer {
  std::string index, input;
  std::string operator()(const std::string& s) const { return replace_all(replace_all(s, "{i}", index), "{input}", input); }
};

Variable layer_variable(const Variable& v, const Layer& at, int64_t i) {
  Variable out = v;
  out.name = at(v.name);
  // Layers start apart whether or not the seed is written (unwritten: 0).
  if (out.init.type != "fill") out.init.attrs.set("seed", out.init.attrs.get_int("seed", 0) + kSeedStridePerLayer * i);
  return out;
}

Op layer_op(const Op& op, const Layer& at, int64_t i) {
  Op out = op;
  out.name = at(op.name);
  // A written seed advances a layer at a time; an unwritten one comes from
  // the op's name (compiler/validate.cc), which differs per layer already.
  if (const OpDef* def = find_op(op.type); def != nullptr && def->seeded && op.attrs.has("seed"))
    out.attrs.set("seed", out.attrs.get_int("seed", 0) + kSeedStridePerLayer * i);
  for (std::string& s : out.inputs) s = at(s);
  for (std::string& s : out.outputs) s = at(s);
  out.recompute = at(op.recompute);
  return out;
}

void check_block(const Block& b, const std::string& path, const std::string& where, check::Issues* issues) {
  if (b.repeat < 1 || b.repeat > kMaxLayers)
    issues->add(path + ".repeat", "{}: repeat {} must be in [1, {}]", where, b.repeat, kMaxLayers);
  if (b.output.empty()) issues->add(path + ".output", "{}: needs 'output', the tensor each layer makes", where);
  if (b.repeat <= 1) return;
  auto needs_index = [&](const std::string& name, const std::string& entry) {
    if (name.find("{i}") == std::string::npos)
      issues->add(entry, "{}: '{}' has no {{i}}: each of the {} layers would define it", where, name, b.repeat);
  };
  for (size_t k = 0; k < b.variables.size(); ++k)
    needs_index(b.variables[k].name, fmt::format("{}.variables[{}]", path, k));
  for (size_t k = 0; k < b.ops.size(); ++k)
    for (const std::string& out : b.ops[k].outputs) needs_index(out, fmt::format("{}.ops[{}]", path, k));
}

}  // namespace

void expand_blocks(const std::vector<Block>& blocks, Job* job, check::Issues* issues, Origins* origins) {
  // Where each op of the expanded job was written: "ops[k]" or a block's entry.
  std::vector<Origin> op_origin;
  for (size_t k = 0; k < job->ops.size(); ++k) op_origin.push_back({fmt::format("ops[{}]", k), ""});
  for (size_t b = 0; b < blocks.size(); ++b) {
    const Block& block = blocks[b];
    const std::string path = fmt::format("blocks[{}]", b), where = check::label("blocks", b, block.name);
    const size_t issues_before = issues->size();
    check_block(block, path, where, issues);
    if (issues->size() != issues_before) continue;
    std::vector<Op> ops;
    std::vector<Origin> from;
    std::set<std::string> made;  // tensors the block's layers make
    std::string input = block.input;
    for (int64_t i = 0; i < block.repeat; ++i) {
      const Layer at{std::to_string(i), input};
      const std::string layer = fmt::format("layer {} of block '{}'", i, block.name);
      for (size_t k = 0; k < block.variables.size(); ++k) {
        job->variables.push_back(layer_variable(block.variables[k], at, i));
        (*origins)[fmt::format("variables[{}]", job->variables.size() - 1)] = {
            fmt::format("{}.variables[{}]", path, k), layer};
      }
      for (size_t k = 0; k < block.ops.size(); ++k) {
        ops.push_back(layer_op(block.ops[k], at, i));
        if (block.recompute && ops.back().recompute.empty()) ops.back().recompute = fmt::format("{}.{}", block.name, i);
        for (const std::string& out : ops.back().outputs) made.insert(out);
        from.push_back({fmt::format("{}.ops[{}]", path, k), layer});
      }
      input = at(block.output);
    }
    // The last layer's output takes the block's name for it.
    if (!block.as.empty())
      for (Op& op : ops) {
        if (op.name == input) op.name = block.as;
        std::replace(op.outputs.begin(), op.outputs.end(), input, block.as);
        std::replace(op.inputs.begin(), op.inputs.end(), input, block.as);
      }
    // After the last op that makes a tensor the block reads from outside.
    size_t at = 0;
    for (const Op& op : ops)
      for (const std::string& in : op.inputs) {
        if (made.count(in)) continue;
        for (size_t k = job->ops.size(); k > at; --k) {
          const auto& outs = job->ops[k - 1].outputs;
          if (std::find(outs.begin(), outs.end(), in) != outs.end()) {
            at = k;
            break;
          }
        }
      }
    job->ops.insert(job->ops.begin() + static_cast<std::ptrdiff_t>(at), ops.begin(), ops.end());
    op_origin.insert(op_origin.begin() + static_cast<std::ptrdiff_t>(at), from.begin(), from.end());
  }
  for (size_t k = 0; k < op_origin.size(); ++k) {
    const std::string expanded = fmt::format("ops[{}]", k);
    if (op_origin[k].path != expanded) (*origins)[expanded] = op_origin[k];
  }
}

}  // namespace rill::graph
