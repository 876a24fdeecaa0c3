#include "kernels/tensor.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace rill {

bool parse_dtype(const std::string& text, DType* out) {
  if (text == "f32" || text == "float32" || text == "float") { *out = DType::kF32; return true; }
  if (text == "i32" || text == "int32" || text == "int") { *out = DType::kI32; return true; }
  if (text == "bf16" || text == "bfloat16") { *out = DType::kBF16; return true; }
  if (text == "f16" || text == "float16" || text == "half") { *out = DType::kF16; return true; }
  return false;
}

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t checked_bytes(const Shape& shape, DType dtype) {
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes) || bytes > kMaxTensorBytes) return -1;
  return bytes;
}

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string Sbp::to_string() const {
  switch (kind) {
    case kSplit: return fmt::format("S({})", axis);
    case kBroadcast: return "B";
    case kPartialSum: return "P";
  }
  return "?";
}

bool parse_sbp(const std::string& text, Sbp* out) {
  if (text == "B") { *out = Sbp::broadcast(); return true; }
  if (text == "P") { *out = Sbp::partial_sum(); return true; }
  if (text.size() == 4 && text[0] == 'S' && text[1] == '(' && text[3] == ')' && text[2] >= '0' && text[2] <= '9') {
    *out = Sbp::split(text[2] - '0');
    return true;
  }
  return false;
}

std::string NdSbp::to_string() const {
  if (flat()) return across.to_string();
  return fmt::format("({}, {})", across.to_string(), within.to_string());
}

bool parse_nd_sbp(const std::string& text, NdSbp* out) {
  std::string t;
  for (char c : text)
    if (c != ' ') t += c;
  if (t.size() >= 2 && t.front() == '(' && t.back() == ')') {
    const std::string inner = t.substr(1, t.size() - 2);  // "A,B"; no SBP holds a comma
    const size_t comma = inner.find(',');
    if (comma == std::string::npos) return false;
    Sbp a, w;
    if (!parse_sbp(inner.substr(0, comma), &a) || !parse_sbp(inner.substr(comma + 1), &w)) return false;
    *out = NdSbp(a, w);
    return true;
  }
  Sbp one;
  if (!parse_sbp(t, &one)) return false;
  *out = NdSbp(one);
  return true;
}

NdSbp canonical(NdSbp sbp, int nodes, int per_node) {
  if (nodes <= 1) sbp.across = sbp.within;
  else if (per_node <= 1) sbp.within = sbp.across;
  return sbp;
}

int64_t split_offset(int64_t dim, int parallel, int index) {
  int64_t base = dim / parallel, extra = dim % parallel;
  return index * base + std::min<int64_t>(index, extra);
}

bool boxing_exchanges(Sbp in, Sbp out, int num_nodes) {
  if (num_nodes <= 1 || in == out) return false;
  return in.kind == Sbp::kPartialSum || (in.kind == Sbp::kSplit && out.kind != Sbp::kPartialSum);
}

BoxingForm boxing_form(const NdSbp& in, const NdSbp& out, int nodes) {
  if (nodes <= 1 || in.across == out.across) return BoxingForm::kWithinNode;
  if (in.flat() && out.flat()) return BoxingForm::kFlat;
  if (!(in.within == out.within)) return BoxingForm::kChain;
  // A lane must hold the same part of the tensor on every node: a split
  // within the node may not cut the axis the nodes split.
  const Sbp& w = in.within;
  if (w.kind == Sbp::kSplit && (in.across == w || out.across == w)) return BoxingForm::kChain;
  return BoxingForm::kLanes;
}

bool boxing_exchanges(const NdSbp& in, const NdSbp& out, int nodes) {
  return boxing_form(in, out, nodes) != BoxingForm::kWithinNode && boxing_exchanges(in.across, out.across, nodes);
}

std::optional<AxisChange> axis_change(const NdSbp& in, const NdSbp& out) {
  if (in.flat() && out.flat()) return AxisChange{CollectiveScope::kAll, in.across, out.across};
  if (in.across == out.across) return AxisChange{CollectiveScope::kNode, in.within, out.within};
  if (in.within == out.within) return AxisChange{CollectiveScope::kLane, in.across, out.across};
  return std::nullopt;
}

std::optional<AxisCollective> axis_collective(const NdSbp& in, const NdSbp& out) {
  const std::optional<AxisChange> change = axis_change(in, out);
  if (!change) return std::nullopt;
  // A lane holds the same part of the tensor on every node only if
  // `within` does not cut the axis the nodes split (as kLanes).
  const Sbp& w = in.within;
  if (change->scope == CollectiveScope::kLane && w.kind == Sbp::kSplit && (in.across == w || out.across == w))
    return std::nullopt;
  const CollectiveScope scope = change->scope;
  const Sbp &a = change->from, &b = change->to;
  if (a.kind == Sbp::kPartialSum && b.kind == Sbp::kBroadcast) return AxisCollective{CollectiveCall::kAllReduce, scope};
  if (a.kind == Sbp::kPartialSum && b.kind == Sbp::kSplit)
    return AxisCollective{CollectiveCall::kReduceScatter, scope, b.axis};
  if (a.kind == Sbp::kSplit && b.kind == Sbp::kBroadcast)
    return AxisCollective{CollectiveCall::kAllGather, scope, a.axis};
  if (a.kind == Sbp::kSplit && b.kind == Sbp::kSplit && a.axis != b.axis)
    return AxisCollective{CollectiveCall::kAllToAll, scope, b.axis, a.axis};
  return std::nullopt;
}

std::vector<std::pair<NdSbp, NdSbp>> boxing_steps(const NdSbp& from, const NdSbp& to, int nodes, int per_node) {
  const NdSbp a = canonical(from, nodes, per_node), b = canonical(to, nodes, per_node);
  if (a == b) return {};
  if (boxing_form(a, b, nodes) != BoxingForm::kChain) return {{a, b}};
  // Two steps when the lanes allow: `within` first, so partial sums are
  // summed (or split) inside the node before anything crosses; `across`
  // first when the target is partial within (P lanes would each carry the
  // whole tensor).
  const NdSbp within_first(a.across, b.within), across_first(b.across, a.within);
  const bool within_ok = boxing_form(within_first, b, nodes) == BoxingForm::kLanes;
  const bool across_ok = boxing_form(a, across_first, nodes) == BoxingForm::kLanes;
  if (within_ok && (b.within.kind != Sbp::kPartialSum || !across_ok)) return {{a, within_first}, {within_first, b}};
  if (across_ok) return {{a, across_first}, {across_first, b}};
  const NdSbp gathered(a.across, Sbp::broadcast()), moved(b.across, Sbp::broadcast());
  std::vector<std::pair<NdSbp, NdSbp>> steps;
  if (!(a == gathered)) steps.push_back({a, gathered});
  steps.push_back({gathered, moved});
  if (!(moved == b)) steps.push_back({moved, b});
  return steps;
}

Region whole_region(const Shape& shape) { return Region{Shape(shape.size(), 0), shape}; }

Region split_region(const Region& region, const Sbp& sbp, int parts, int index) {
  Region r = region;
  if (sbp.kind == Sbp::kSplit && sbp.axis >= 0 && sbp.axis < static_cast<int>(r.extent.size())) {
    const int64_t dim = region.extent[sbp.axis];
    const int64_t begin = split_offset(dim, parts, index);
    r.origin[sbp.axis] = region.origin[sbp.axis] + begin;
    r.extent[sbp.axis] = split_offset(dim, parts, index + 1) - begin;
  }
  return r;
}

Region node_region(const Shape& logical, const NdSbp& sbp, int nodes, int node) {
  return split_region(whole_region(logical), sbp.across, nodes, node);
}

Region piece_region(const Shape& logical, const NdSbp& sbp, int nodes, int per_node, int rank) {
  return split_region(node_region(logical, sbp, nodes, rank / per_node), sbp.within, per_node, rank % per_node);
}

std::optional<CollectiveScope> own_piece_scope(const NdSbp& in, const NdSbp& out, const Shape& logical, int nodes,
                                               int per_node) {
  const std::optional<AxisChange> change = axis_change(in, out);
  if (!change) return std::nullopt;
  const Sbp &a = change->from, &b = change->to;
  const bool sliced = a.kind == Sbp::kBroadcast && b.kind == Sbp::kSplit;
  const bool zeroed = b.kind == Sbp::kPartialSum && a.kind != Sbp::kPartialSum;
  if (!sliced && !zeroed) return std::nullopt;
  // The piece a device reads must hold what it writes (B -> S), or lie in
  // it (S -> P): not so where `within` splits the axis `across` splits.
  for (int rank = 0; rank < nodes * per_node; ++rank) {
    const Region from = piece_region(logical, in, nodes, per_node, rank);
    const Region to = piece_region(logical, out, nodes, per_node, rank);
    const Region both = intersect(from, to);
    const Region& inner = a.kind == Sbp::kSplit ? from : to;
    if (!(both.origin == inner.origin) || !(both.extent == inner.extent)) return std::nullopt;
  }
  return change->scope;
}

bool own_piece_holder(CollectiveScope scope, int rank, int per_node) {
  switch (scope) {
    case CollectiveScope::kAll: return rank == 0;
    case CollectiveScope::kNode: return rank % per_node == 0;
    case CollectiveScope::kLane: return rank / per_node == 0;
  }
  return false;
}

Region intersect(const Region& a, const Region& b) {
  Region r = a;
  for (size_t i = 0; i < a.origin.size() && i < b.origin.size(); ++i) {
    const int64_t begin = std::max(a.origin[i], b.origin[i]);
    const int64_t end = std::min(a.origin[i] + a.extent[i], b.origin[i] + b.extent[i]);
    r.origin[i] = begin;
    r.extent[i] = std::max<int64_t>(0, end - begin);
  }
  return r;
}

namespace {
void copy_rows(const void* src, void* dst, size_t element_size, int64_t s, int64_t d, int64_t n) {
  const auto e = static_cast<int64_t>(element_size);
  std::memcpy(static_cast<std::byte*>(dst) + d * e, static_cast<const std::byte*>(src) + s * e,
              static_cast<size_t>(n) * element_size);
}
}  // namespace

void copy_box(const void* src, const Shape& src_shape, const int64_t* src_origin, void* dst, const Shape& dst_shape,
              const int64_t* dst_origin, const Shape& extent, size_t element_size) {
  for_each_box_row(extent, src_shape, src_origin, dst_shape, dst_origin,
                   [&](int64_t s, int64_t d, int64_t n) { copy_rows(src, dst, element_size, s, d, n); });
}

void copy_region(const void* src, const Region& src_region, void* dst, const Region& dst_region, const Region& box,
                 size_t element_size) {
  for_each_row(src_region, dst_region, box,
               [&](int64_t s, int64_t d, int64_t n) { copy_rows(src, dst, element_size, s, d, n); });
}

}  // namespace rill
