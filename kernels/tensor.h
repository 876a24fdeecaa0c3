// Tensor metadata (dtype, shape), SBP descriptors and a non-owning tensor view.
// Plain values; safe to copy between threads. Kernels see only TensorView:
// memory is owned by the runtime's regsts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rill {

enum class DType : uint8_t { kF32 = 0, kI32 = 1 };

inline size_t dtype_size(DType dtype) { return dtype == DType::kF32 ? 4 : 4; }
inline const char* dtype_name(DType dtype) { return dtype == DType::kF32 ? "f32" : "i32"; }
// Parses "f32"/"float32"/"i32"/"int32"; returns false on anything else.
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

// Whether boxing `in` -> `out` over pieces on `num_nodes` nodes needs data
// from other nodes (a collective among them): from P always, from S unless to
// P. B -> anything, and S -> P, are local to each node.
bool boxing_exchanges(Sbp in, Sbp out, int num_nodes);

// The physical shape of one of `parallel` pieces of a logical tensor.
// Split pieces are balanced: the first (dim % parallel) pieces get one more.
Shape physical_shape(const Shape& logical, const Sbp& sbp, int parallel, int index);
// Offset of piece `index` along the split axis.
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
// Piece `index` of `parallel` of a logical tensor in `sbp` (the whole for B and P).
Region piece_region(const Shape& logical, const Sbp& sbp, int parallel, int index);
// The common part of two regions (extent 0 on some axis when they do not meet).
Region intersect(const Region& a, const Region& b);

// Calls fn(src_offset, dst_offset, count), in elements, for each contiguous
// row of `box` (a region inside both), where `src` covers src_region and
// `dst` covers dst_region. Allocates nothing.
template <typename Fn>
void for_each_row(const Region& src, const Region& dst, const Region& box, Fn&& fn) {
  const size_t rank = box.extent.size();
  if (rank == 0) {
    fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  if (box.size() == 0) return;
  // s and d: the linear offset of the indices before `axis`, scaled to axis's stride base.
  auto walk = [&](auto& self, size_t axis, int64_t s, int64_t d) -> void {
    const int64_t s0 = box.origin[axis] - src.origin[axis], d0 = box.origin[axis] - dst.origin[axis];
    if (axis + 1 == rank) {
      fn(s + s0, d + d0, box.extent[axis]);
      return;
    }
    for (int64_t i = 0; i < box.extent[axis]; ++i)
      self(self, axis + 1, (s + s0 + i) * src.extent[axis + 1], (d + d0 + i) * dst.extent[axis + 1]);
  };
  walk(walk, 0, 0, 0);
}

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
