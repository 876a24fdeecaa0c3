// Tensor metadata (dtype, shape), SBP descriptors and a non-owning tensor view.
// Plain values; safe to copy between threads. Kernels see only TensorView:
// memory is owned by the runtime's regsts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/collective_scratch.h"
#include "base/half.h"

namespace rill {

// A branch on a dtype is a switch with a case for each and no default (or
// visit_dtype), so a dtype added here compiles nowhere until every branch
// handles it (-Werror=switch). A value outside the enum is refused where it
// enters (job files, plans, checkpoints), never branched on.
//
// bf16 and f16 (base/half.h) are stored as 16-bit floats; kernels compute
// in float.
enum class DType : uint8_t { kF32 = 0, kI32 = 1, kBF16 = 2, kF16 = 3 };
inline constexpr DType kDTypes[] = {DType::kF32, DType::kI32, DType::kBF16, DType::kF16};

// Calls f(std::type_identity<T>{}) with T the C++ type of `dtype`'s elements.
template <typename F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(std::type_identity<float>{});
    case DType::kI32: return f(std::type_identity<int32_t>{});
    case DType::kBF16: return f(std::type_identity<BFloat16>{});
    case DType::kF16: return f(std::type_identity<Float16>{});
  }
  std::abort();  // not a DType: refused where it entered
}

// a + b for an element type of visit_dtype: 16-bit floats add in float and
// round once.
template <typename T>
T add_elements(T a, T b) {
  if constexpr (kIsHalf<T>)
    return T::from_float(a.to_float() + b.to_float());
  else
    return a + b;
}

// The element of type T nearest `v` (a 16-bit float rounds from float; an
// i32 converts as static_cast does).
template <typename T>
T element_from(double v) {
  if constexpr (kIsHalf<T>)
    return T::from_float(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// An element as float (an i32 rounded to the nearest float).
template <typename T>
float float_of(T v) {
  if constexpr (kIsHalf<T>)
    return v.to_float();
  else
    return static_cast<float>(v);
}

inline size_t dtype_size(DType dtype) {
  return visit_dtype(dtype, []<typename T>(std::type_identity<T>) { return sizeof(T); });
}
inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}
// Whether `dtype` holds floating-point values.
inline bool is_float(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: return true;
    case DType::kI32: return false;
  }
  return false;
}
// Parses "f32"/"float32", "i32"/"int32", "bf16"/"bfloat16",
// "f16"/"float16"/"half"; returns false on anything else.
bool parse_dtype(const std::string& text, DType* out);

using Shape = std::vector<int64_t>;

int64_t num_elements(const Shape& shape);

// The largest tensor a job may hold: 2^40 bytes (1 TiB). Shapes beyond it are
// refused when checked or compiled, so no size computation can overflow.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;
// Bytes of a tensor of `shape`, or -1 when a dim is negative or the size is
// over kMaxTensorBytes (computed without overflow).
int64_t checked_bytes(const Shape& shape, DType dtype);

std::string shape_string(const Shape& shape);  // "[256, 784]"

struct TensorMeta {
  Shape shape;
  DType dtype = DType::kF32;
  size_t bytes() const { return static_cast<size_t>(num_elements(shape)) * dtype_size(dtype); }
  bool operator==(const TensorMeta&) const = default;
};

// How a logical tensor maps onto the devices of its placement.
struct Sbp {
  enum Kind : uint8_t { kSplit = 0, kBroadcast = 1, kPartialSum = 2 };
  Kind kind = kBroadcast;
  int axis = 0;  // meaningful for kSplit only

  static Sbp split(int axis) { return {kSplit, axis}; }
  static Sbp broadcast() { return {kBroadcast, 0}; }
  static Sbp partial_sum() { return {kPartialSum, 0}; }
  bool operator==(const Sbp& o) const {
    return kind == o.kind && (kind != kSplit || axis == o.axis);
  }
  std::string to_string() const;  // "S(0)", "B", "P"
};
// Parses "S(0)", "S(1)", "B", "P".
bool parse_sbp(const std::string& text, Sbp* out);

// 2-D SBP over a cluster seen as the hierarchy [nodes, devices per node]: one
// Sbp between nodes (`across`) and one between the devices of each node
// (`within`). Piece (node n, device d) is piece d of `within` of the part n
// of `across` holds (nested, as OneFlow's 2-D SBP: (S(0), S(1)) gives rows by
// node and columns by device; (S(0), S(0)) splits each node's rows again).
// Equal axes are the 1-D SBP over all devices: an Sbp converts to (x, x),
// and to_string prints it as 1-D. P on an axis: the logical value is the sum
// over that axis.
struct NdSbp {
  Sbp across;
  Sbp within;
  NdSbp() = default;
  NdSbp(Sbp both) : across(both), within(both) {}  // NOLINT: 1-D is 2-D with equal axes
  NdSbp(Sbp a, Sbp w) : across(a), within(w) {}
  bool flat() const { return across == within; }
  bool has(Sbp::Kind kind) const { return across.kind == kind || within.kind == kind; }
  bool operator==(const NdSbp& o) const { return across == o.across && within == o.within; }
  std::string to_string() const;  // "S(0)" (flat) or "(S(0), B)"
};
// Parses 1-D ("S(1)") or 2-D ("(S(0), B)", spaces optional).
bool parse_nd_sbp(const std::string& text, NdSbp* out);
// The same layout written canonically for `nodes` x `per_node` devices: an
// axis over one part is the same as the other axis (both become equal), so
// jobs with 2-D SBP run unchanged on one node or one device per node.
NdSbp canonical(NdSbp sbp, int nodes, int per_node);

// Whether boxing `in` -> `out` over pieces on `num_nodes` nodes needs data
// from other nodes (a collective among them): from P always, from S unless to
// P. B -> anything, and S -> P, are local to each node.
bool boxing_exchanges(Sbp in, Sbp out, int num_nodes);

// How one boxing task per node converts `in` to `out` over `nodes` nodes:
//   kWithinNode  one node, or the same `across`: each node alone, between its devices
//   kFlat        both 1-D: over all devices at once
//   kLanes       the same `within`: across nodes, each device index a lane of
//                its own (lane d: device d of every node), all lanes in one
//                collective; `within` B is one lane
//   kChain       none of these: the compiler chains boxings (compiler/boxing.h)
enum class BoxingForm : uint8_t { kWithinNode, kFlat, kLanes, kChain };
BoxingForm boxing_form(const NdSbp& in, const NdSbp& out, int nodes);
// Whether boxing `in` -> `out` (a form other than kChain) exchanges data
// between nodes: boxing_exchanges of the `across` SBPs, unless kWithinNode.
bool boxing_exchanges(const NdSbp& in, const NdSbp& out, int nodes);
// A boxing that one collective does on one axis of the hierarchy (a
// device collective, train.nccl): `scope` says among which ranks, kAll
// every device (both SBPs 1-D), kNode the devices of each node (`across`
// unchanged: the node's part of the tensor), kLane each device index's
// ranks, one per node (`within` unchanged, not splitting the axis `across`
// splits: lane d's part of the tensor, the same on every node); `call` what
// it does on that axis: all-reduce (P -> B), reduce-scatter (P -> S(a)),
// all-gather (S(a) -> B) or all-to-all (S(b) -> S(a), b != a), blocks of
// that part along tensor axis `split` (a) in rank order. None for anything
// else (it is then a boxing task's).
enum class CollectiveScope : uint8_t { kAll, kNode, kLane };
// The one axis of the hierarchy `in` -> `out` changes: its scope (both
// 1-D: every device; `across` kept: within each node; `within` kept:
// each lane) and its SBPs on that axis; none when both axes change.
struct AxisChange {
  CollectiveScope scope;
  Sbp from, to;
};
std::optional<AxisChange> axis_change(const NdSbp& in, const NdSbp& out);
struct AxisCollective {
  CollectiveCall call;
  CollectiveScope scope;
  int split = 0;     // a reduce-scatter's or all-to-all's output blocks' tensor axis, an all-gather's input's
  int gathered = 0;  // an all-to-all's input blocks' axis (what it receives, it lays along this one)
};
std::optional<AxisCollective> axis_collective(const NdSbp& in, const NdSbp& out);
// A device collective's blocks of one tensor along one axis, one per rank
// in rank order: the tensor seen as [outer, slices, slice] elements, rank
// r's block counts[r] elements (counts[r] / (outer * slice) slices). outer
// 1: the blocks lie one after another; else each is rows of columns, packed
// together to be sent and unpacked where received.
struct AxisBlocks {
  std::vector<size_t> counts;
  size_t outer = 1, slice = 1;
  bool operator==(const AxisBlocks&) const = default;
};
// The boxing tasks that turn `from` into `to` on `nodes` x `per_node`
// devices, in order: none when equal, one when a task can (boxing_form),
// else two, one per axis, when the lanes allow (`within` first unless the
// target is P within), else a chain through (from.across, B) and
// (to.across, B): gather or sum within each node, convert across nodes as
// one lane, then split or scatter within each node.
std::vector<std::pair<NdSbp, NdSbp>> boxing_steps(const NdSbp& from, const NdSbp& to, int nodes, int per_node);

// Offset of piece `index` of `parallel` along a split axis of `dim`. Split
// pieces are balanced: the first (dim % parallel) pieces get one more.
int64_t split_offset(int64_t dim, int parallel, int index);

// A box of a logical tensor: where it starts and how far it reaches on each
// axis. A dense buffer "covering" a region holds exactly its elements in
// row-major order (a piece of an S(axis) tensor covers its slice).
struct Region {
  Shape origin;
  Shape extent;
  int64_t size() const { return num_elements(extent); }
  bool operator==(const Region&) const = default;
};
// The whole of a tensor of `shape`.
Region whole_region(const Shape& shape);
// Piece `rank` (node rank / per_node, device rank % per_node) of a logical
// tensor in `sbp` over `nodes` x `per_node` devices, split as NdSbp says.
Region piece_region(const Shape& logical, const NdSbp& sbp, int nodes, int per_node, int rank);
// What node `node`'s pieces cover together: its part of `sbp.across`.
Region node_region(const Shape& logical, const NdSbp& sbp, int nodes, int node);
// Piece `index` of `parts` of `region` split by `sbp` (the region for B, P).
Region split_region(const Region& region, const Sbp& sbp, int parts, int index);
// The common part of two regions (extent 0 on some axis when they do not meet).
Region intersect(const Region& a, const Region& b);

// A conversion on one axis of the hierarchy (scopes as axis_collective's)
// that each device makes from its own piece alone: B -> S(a) (its output
// piece inside its input piece), B -> P (the axis's first rank keeps the
// value: own_piece_holder) or S(a) -> P (its input piece inside its output
// piece, zeros around), on a `logical` tensor over `nodes` x `per_node`
// devices; none for anything else.
std::optional<CollectiveScope> own_piece_scope(const NdSbp& in, const NdSbp& out, const Shape& logical, int nodes,
                                               int per_node);
bool own_piece_holder(CollectiveScope scope, int rank, int per_node);

// The most axes a tensor may have (job checks refuse more).
inline constexpr int kMaxRank = 8;

// Calls fn(src_at, dst_at, count), in elements, for each contiguous row of a
// box of `extent` read from a row-major tensor of `src_shape` at `src_origin`
// and written to one of `dst_shape` at `dst_origin` (rank <= kMaxRank; the
// last axis is contiguous in both). Allocates nothing.
template <typename Fn>
void for_each_box_row(const Shape& extent, const Shape& src_shape, const int64_t* src_origin, const Shape& dst_shape,
                      const int64_t* dst_origin, Fn&& fn) {
  const int rank = static_cast<int>(extent.size());
  if (num_elements(extent) == 0) return;
  if (rank == 0) {
    fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  int64_t src_strides[kMaxRank], dst_strides[kMaxRank], index[kMaxRank] = {};
  int64_t src_at = 0, dst_at = 0, src_stride = 1, dst_stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    src_strides[d] = src_stride;
    dst_strides[d] = dst_stride;
    src_at += src_origin[d] * src_stride;
    dst_at += dst_origin[d] * dst_stride;
    src_stride *= src_shape[d];
    dst_stride *= dst_shape[d];
  }
  const int64_t rows = num_elements(extent) / extent[rank - 1];
  for (int64_t r = 0; r < rows; ++r) {
    fn(src_at, dst_at, extent[rank - 1]);
    for (int d = rank - 2; d >= 0; --d) {  // odometer over all but the last axis
      src_at += src_strides[d];
      dst_at += dst_strides[d];
      if (++index[d] < extent[d]) break;
      src_at -= src_strides[d] * extent[d];
      dst_at -= dst_strides[d] * extent[d];
      index[d] = 0;
    }
  }
}

// The same for `box` (a region inside both), where `src` covers src_region
// and `dst` covers dst_region.
template <typename Fn>
void for_each_row(const Region& src, const Region& dst, const Region& box, Fn&& fn) {
  int64_t src_origin[kMaxRank], dst_origin[kMaxRank];
  for (size_t d = 0; d < box.extent.size(); ++d) {
    src_origin[d] = box.origin[d] - src.origin[d];
    dst_origin[d] = box.origin[d] - dst.origin[d];
  }
  for_each_box_row(box.extent, src.extent, src_origin, dst.extent, dst_origin, fn);
}

// The same box as strided 2-D copies (cudaMemcpy2D's shape): calls
// fn(src_at, dst_at, width, rows, src_pitch, dst_pitch), all in bytes of
// `element`-byte elements, for `rows` rows of `width` bytes each. Trailing
// axes the box, `src` and `dst` all hold whole are one row; axes before them
// that both hold whole are more rows of one call; one call per index of the
// axes before those. Allocates nothing.
template <typename Fn>
void for_each_box_plane(const Region& src, const Region& dst, const Region& box, size_t element, Fn&& fn) {
  const int rank = static_cast<int>(box.extent.size());
  if (num_elements(box.extent) == 0) return;
  if (rank == 0) {
    fn(size_t{0}, size_t{0}, element, size_t{1}, element, element);
    return;
  }
  auto whole = [&](int d) { return box.extent[d] == src.extent[d] && box.extent[d] == dst.extent[d]; };
  // Row: axes [inner, rank) (whole past inner); rows: axes [row, inner).
  int inner = rank - 1;
  while (inner > 0 && whole(inner)) --inner;
  int64_t width = 1, src_pitch = 1, dst_pitch = 1;
  for (int d = inner; d < rank; ++d) {
    width *= box.extent[d];
    src_pitch *= src.extent[d];
    dst_pitch *= dst.extent[d];
  }
  int row = inner;  // no row axis where the row is the whole box
  int64_t rows = 1;
  if (inner > 0) {
    row = inner - 1;
    rows = box.extent[row];
    while (row > 0 && whole(row)) rows *= box.extent[--row];
  }
  // One call per index of the axes before `row` (an odometer over them).
  int64_t src_strides[kMaxRank], dst_strides[kMaxRank], index[kMaxRank] = {};
  int64_t src_at = 0, dst_at = 0, src_stride = 1, dst_stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    src_strides[d] = src_stride;
    dst_strides[d] = dst_stride;
    src_at += (box.origin[d] - src.origin[d]) * src_stride;
    dst_at += (box.origin[d] - dst.origin[d]) * dst_stride;
    src_stride *= src.extent[d];
    dst_stride *= dst.extent[d];
  }
  int64_t calls = 1;
  for (int d = 0; d < row; ++d) calls *= box.extent[d];
  const auto bytes = [&](int64_t n) { return static_cast<size_t>(n) * element; };
  for (int64_t c = 0; c < calls; ++c) {
    fn(bytes(src_at), bytes(dst_at), bytes(width), static_cast<size_t>(rows), bytes(src_pitch), bytes(dst_pitch));
    for (int d = row - 1; d >= 0; --d) {
      src_at += src_strides[d];
      dst_at += dst_strides[d];
      if (++index[d] < box.extent[d]) break;
      src_at -= src_strides[d] * box.extent[d];
      dst_at -= dst_strides[d] * box.extent[d];
      index[d] = 0;
    }
  }
}

// Copies a box of `extent` elements of `element_size` bytes between row-major
// tensors (see for_each_box_row).
void copy_box(const void* src, const Shape& src_shape, const int64_t* src_origin, void* dst, const Shape& dst_shape,
              const int64_t* dst_origin, const Shape& extent, size_t element_size);

// Copies `box` from a buffer covering `src_region` to one covering `dst_region`.
void copy_region(const void* src, const Region& src_region, void* dst, const Region& dst_region, const Region& box,
                 size_t element_size);

// A non-owning view of one tensor in a regst.
struct TensorView {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::kF32;

  int64_t size() const { return num_elements(shape); }
  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
  size_t bytes() const { return static_cast<size_t>(size()) * dtype_size(dtype); }
};

}  // namespace rill
