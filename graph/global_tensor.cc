#include "graph/global_tensor.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace rill {
namespace {

// The index of `rank` on each hierarchy axis: its node's, its device's.
int axis_index(const graph::Placement& p, bool across, int rank) {
  return across ? rank / p.per_node() : rank % p.per_node();
}

Status check_layout(const graph::Placement& p, const NdSbp& sbp, size_t rank_of_tensor) {
  if (p.parallel() < 1) return invalid_argument("the placement has no devices");
  if (!p.two_d && !sbp.flat())
    return invalid_argument("SBP {} is 2-D but placement '{}' is 1-D (write it as [{},{}] for a 2-D hierarchy)",
                            sbp.to_string(), p.to_string(), p.num_nodes(), p.per_node());
  for (const Sbp& s : {sbp.across, sbp.within})
    if (s.kind == Sbp::kSplit && (s.axis < 0 || static_cast<size_t>(s.axis) >= rank_of_tensor))
      return invalid_argument("SBP {} splits axis {} of a tensor with {} axes", sbp.to_string(), s.axis,
                              rank_of_tensor);
  return {};
}

size_t size_of(const InlineTensor& t) { return t.held(); }

Status check_values(const InlineTensor& t, const std::string& what) {
  const int64_t n = num_elements(t.shape);
  if (n < 0 || static_cast<int64_t>(size_of(t)) != n)
    return invalid_argument("{} has shape {} but {} values", what, shape_string(t.shape), size_of(t));
  return {};
}

// Adds `piece` (covering exactly the box `region`) into `whole` (a tensor of
// `whole_shape`).
template <typename T>
void add_box(const Region& region, const std::vector<T>& piece, std::vector<T>& whole, const Shape& whole_shape) {
  const Shape zero(region.extent.size(), 0);
  for_each_box_row(region.extent, region.extent, zero.data(), whole_shape, region.origin.data(),
                   [&](int64_t src, int64_t dst, int64_t count) {
                     for (int64_t i = 0; i < count; ++i) whole[dst + i] = add_elements(whole[dst + i], piece[src + i]);
                   });
}

// Copies the box `region` of `whole` into `piece`, which covers exactly it.
template <typename T>
void read_box(const Region& region, const std::vector<T>& whole, const Shape& whole_shape, std::vector<T>& piece) {
  const Shape zero(region.extent.size(), 0);
  for_each_box_row(region.extent, whole_shape, region.origin.data(), region.extent, zero.data(),
                   [&](int64_t src, int64_t dst, int64_t count) {
                     std::copy_n(whole.begin() + src, count, piece.begin() + dst);
                   });
}

}  // namespace

StatusOr<InlineTensor> to_global(const std::vector<InlineTensor>& locals, const graph::Placement& placement,
                                 const NdSbp& sbp) {
  if (locals.empty()) return invalid_argument("to_global: no local pieces");
  if (static_cast<int>(locals.size()) != placement.parallel())
    return invalid_argument("to_global: {} local pieces for placement '{}', which has {} devices", locals.size(),
                            placement.to_string(), placement.parallel());
  const InlineTensor& first = locals[0];
  RILL_RETURN_IF_ERROR(check_layout(placement, sbp, first.shape.size()).with_context("to_global"));
  for (size_t r = 0; r < locals.size(); ++r) {
    const std::string what = fmt::format("to_global: the piece of device {} ('{}')", r, locals[r].name);
    if (locals[r].dtype != first.dtype)
      return invalid_argument("{} is {}, device 0's is {}", what, dtype_name(locals[r].dtype), dtype_name(first.dtype));
    if (locals[r].shape.size() != first.shape.size())
      return invalid_argument("{} has {} axes, device 0's has {}", what, locals[r].shape.size(), first.shape.size());
    RILL_RETURN_IF_ERROR(check_values(locals[r], what));
  }
  // Each axis of the tensor: its parts along the hierarchy axes that split
  // it, read from the devices whose index on every other hierarchy axis is 0.
  const int n = placement.parallel();
  auto splits = [&](bool across, size_t axis) {
    const Sbp& s = across ? sbp.across : sbp.within;
    return s.kind == Sbp::kSplit && static_cast<size_t>(s.axis) == axis;
  };
  InlineTensor global;
  global.name = first.name;
  global.dtype = first.dtype;
  global.shape.assign(first.shape.size(), 0);
  for (size_t axis = 0; axis < first.shape.size(); ++axis) {
    for (int r = 0; r < n; ++r) {
      const bool counted = (splits(true, axis) || axis_index(placement, true, r) == 0) &&
                           (splits(false, axis) || axis_index(placement, false, r) == 0);
      if (counted) global.shape[axis] += locals[static_cast<size_t>(r)].shape[axis];
    }
  }
  for (int r = 0; r < n; ++r) {
    const Region region = piece_region(global.shape, sbp, placement.num_nodes(), placement.per_node(), r);
    if (locals[static_cast<size_t>(r)].shape != region.extent)
      return invalid_argument(
          "to_global: the piece of device {} has shape {}, but its part of the global {} in {} is {} (a split "
          "gives its first parts one more element)",
          r, shape_string(locals[static_cast<size_t>(r)].shape), shape_string(global.shape), sbp.to_string(),
          shape_string(region.extent));
  }
  const size_t total = static_cast<size_t>(num_elements(global.shape));
  visit_dtype(global.dtype, [&]<typename T>(std::type_identity<T>) { global.values<T>().assign(total, element_from<T>(0.0)); });
  // B replicas: one counts (index 0 on every B axis), the others must equal
  // it. P: every index counts, summed. S: each part is its own box.
  for (int r = 0; r < n; ++r) {
    const bool node_b = sbp.across.kind == Sbp::kBroadcast, device_b = sbp.within.kind == Sbp::kBroadcast;
    const int node = axis_index(placement, true, r), device = axis_index(placement, false, r);
    const int rep = (node_b ? 0 : node) * placement.per_node() + (device_b ? 0 : device);
    const InlineTensor& piece = locals[static_cast<size_t>(r)];
    if (rep != r) {
      const InlineTensor& kept = locals[static_cast<size_t>(rep)];
      // Bit for bit (a float's NaN is not equal to itself, but its replica's is the same).
      const bool equal = visit_dtype(piece.dtype, [&]<typename T>(std::type_identity<T>) {
        return piece.values<T>().size() == kept.values<T>().size() &&
               std::memcmp(piece.values<T>().data(), kept.values<T>().data(), piece.values<T>().size() * sizeof(T)) == 0;
      });
      if (!equal)
        return invalid_argument("to_global: in {} devices {} and {} hold one replica (B), but their pieces differ",
                                sbp.to_string(), rep, r);
      continue;
    }
    const Region region = piece_region(global.shape, sbp, placement.num_nodes(), placement.per_node(), r);
    visit_dtype(global.dtype, [&]<typename T>(std::type_identity<T>) {
      add_box(region, piece.values<T>(), global.values<T>(), global.shape);
    });
  }
  return global;
}

StatusOr<InlineTensor> to_local(const InlineTensor& global, const graph::Placement& placement, const NdSbp& sbp,
                                int rank) {
  RILL_RETURN_IF_ERROR(check_layout(placement, sbp, global.shape.size()).with_context("to_local"));
  RILL_RETURN_IF_ERROR(check_values(global, fmt::format("to_local: '{}'", global.name)));
  if (rank < 0 || rank >= placement.parallel())
    return invalid_argument("to_local: device {} is not one of placement '{}''s {} devices", rank,
                            placement.to_string(), placement.parallel());
  const Region region = piece_region(global.shape, sbp, placement.num_nodes(), placement.per_node(), rank);
  InlineTensor piece;
  piece.name = global.name;
  piece.dtype = global.dtype;
  piece.shape = region.extent;
  const size_t count = static_cast<size_t>(region.size());
  // A P axis keeps the value on its index 0 and zeros elsewhere.
  const bool zero = (sbp.across.kind == Sbp::kPartialSum && axis_index(placement, true, rank) != 0) ||
                    (sbp.within.kind == Sbp::kPartialSum && axis_index(placement, false, rank) != 0);
  visit_dtype(piece.dtype, [&]<typename T>(std::type_identity<T>) {
    piece.values<T>().assign(count, element_from<T>(0.0));
    if (!zero) read_box(region, global.values<T>(), global.shape, piece.values<T>());
  });
  return piece;
}

}  // namespace rill
