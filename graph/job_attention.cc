// `attention` with `heads`: multi-head attention on [B, T, C] tensors as
// the ops the long form spells (graph/job_expand.h): the split into heads,
// the attention of each head, the merge back.
#include <variant>

#include "graph/job_expand.h"

namespace rill::graph {
namespace {

Op make(const Op& written, const std::string& name, const std::string& type, std::vector<std::string> inputs,
        Attrs attrs) {
  Op op;
  op.name = name;
  op.type = type;
  op.inputs = std::move(inputs);
  op.outputs = {name};
  op.attrs = std::move(attrs);
  op.placement = written.placement;
  op.recompute = written.recompute;
  return op;
}

const std::vector<int64_t> kSwapHeadsAndTime = {0, 2, 1, 3};

}  // namespace

StatusOr<std::vector<Op>> expand_attention_heads(const Op& op) {
  const auto& values = op.attrs.values();
  if (!op.attrs.has("heads"))
    return invalid_argument("attention's attr 'composed' needs 'heads' (q, k and v as [B, T, C]); on [..., T, D] "
                            "write the matmul, softmax and matmul");
  const auto* heads = std::get_if<int64_t>(&values.at("heads"));
  if (heads == nullptr || *heads < 1)
    return invalid_argument("attention's attr 'heads' must be an int >= 1 (q, k and v are [B, T, C], C split into "
                            "that many heads)");
  if (op.inputs.size() != 3) return invalid_argument("attention takes [q, k, v], got {} input(s)", op.inputs.size());
  if (!op.outputs.empty() && op.outputs != std::vector<std::string>{op.name})
    return invalid_argument("attention with heads has one output, y [B, T, C], named '{}' (each head's log-sum-exp "
                            "is '{}.lse')",
                            op.name, op.name);
  const bool composed = op.attrs.get_int("composed", 0) != 0;
  if (composed && !op.attrs.has("scale"))
    return invalid_argument("attention with composed needs attr 'scale' (1 / sqrt(C / heads) as the fused op's "
                            "default): its softmax has no head size to take it from");
  for (const auto& [name, value] : values)
    if (name != "heads" && name != "composed" && name != "causal" && name != "scale")
      return invalid_argument("attention with heads takes attrs heads, causal, scale and composed, not '{}'", name);
  Attrs inner;
  if (op.attrs.has("causal")) inner.set("causal", values.at("causal"));
  if (op.attrs.has("scale")) inner.set("scale", values.at("scale"));

  const std::string& n = op.name;
  std::vector<Op> ops;
  const char* parts[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const std::string part = n + "." + parts[i];
    ops.push_back(make(op, part + "_split", "reshape", {op.inputs[i]}, {{"shape", std::vector<int64_t>{0, 0, *heads, -1}}}));
    ops.push_back(make(op, part, "transpose", {part + "_split"}, {{"perm", kSwapHeadsAndTime}}));
  }
  if (composed) {
    ops.push_back(make(op, n + ".scores", "matmul", {n + ".q", n + ".k"}, {{"transpose_b", int64_t{1}}}));
    ops.push_back(make(op, n + ".probs", "softmax", {n + ".scores"}, inner));
    ops.push_back(make(op, n + ".heads", "matmul", {n + ".probs", n + ".v"}, {}));
  } else {
    Op fused = make(op, n + ".heads", "attention", {n + ".q", n + ".k", n + ".v"}, inner);
    fused.outputs = {n + ".heads", n + ".lse"};
    ops.push_back(std::move(fused));
  }
  ops.push_back(make(op, n + ".merge", "transpose", {n + ".heads"}, {{"perm", kSwapHeadsAndTime}}));
  Op merged = make(op, n, "reshape", {n + ".merge"}, {{"shape", std::vector<int64_t>{0, 0, -1}}});
  merged.output_sbp = op.output_sbp;
  ops.push_back(std::move(merged));
  return ops;
}

}  // namespace rill::graph
