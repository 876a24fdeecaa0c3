// to_global and to_local: between the local pieces of a tensor, one per
// device of a placement, and the global (logical) tensor they make in an SBP,
// on the host. The pieces are laid out exactly as the compiler and the
// runtime lay them out (piece_region: rank r is device r % D of node r / D;
// a split gives its first parts one more element when the size does not
// divide; a 2-D SBP nests the device axis inside each node's part), so
//
//   auto rows = rill::to_global({x0, x1}, graph::whole_cluster(kCpu, 2, 1), Sbp::split(0));
//
// is the global batch a job on 2 nodes x cpu:1 reads as x0 on node 0 and x1
// on node 1 (usable as an inline dataset), and to_local(w, placement, sbp, r)
// is what device r of a trained job held of w (JobResult::variables and
// ::fetched hold global values, gathered on the master).
//
// S(k): the pieces are the parts along k; B: every device holds the whole
// value (to_global checks they are equal, bit for bit); P: the value is the
// sum of the pieces (to_local puts the whole value on the first device of
// each P group and zeros on the others, as B -> P boxing does). f32 and i32.
// Pure functions; any thread.
#pragma once

#include <vector>

#include "base/status.h"
#include "graph/placement.h"
#include "kernels/data/dataset_spec.h"
#include "kernels/tensor.h"

namespace rill {

// The global tensor whose pieces on `placement` in `sbp` are `locals`, in rank
// order (its name is locals[0]'s). Errors name the device and what is wrong:
// a count other than the placement's devices, a dtype or rank that differs,
// a piece whose shape is not its part of the global shape, B replicas that
// differ, a 2-D SBP on a 1-D placement.
StatusOr<InlineTensor> to_global(const std::vector<InlineTensor>& locals, const graph::Placement& placement,
                                 const NdSbp& sbp);

// Device `rank`'s piece of `global` on `placement` in `sbp`.
StatusOr<InlineTensor> to_local(const InlineTensor& global, const graph::Placement& placement, const NdSbp& sbp,
                                int rank);

}  // namespace rill
