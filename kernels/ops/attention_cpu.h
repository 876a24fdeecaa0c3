// attention's CPU kernels and signatures (kernels/ops/attention.cc), which ring
// attention's steps (attention_ring.cc) run before folding in the steps
// before them. Internal to kernels/ops.
#pragma once

#include <span>
#include <vector>

#include "kernels/op.h"

namespace rill {

// attention: inputs q, k, v (any more are left alone); outputs y, lse.
Status cpu_attention(KernelContext& ctx);
// attention_grad: inputs q, k, v, y, lse, dy (any more left alone); outputs dq, dk, dv.
Status cpu_attention_grad(KernelContext& ctx);
// Splits on each leading axis (batch, heads) of q's `rank`, or every tensor whole.
std::vector<SbpSignature> leading_splits(int rank, int inputs, int outputs);
// Either's scratch: a row of scores.
size_t scratch_attention(const Attrs& attrs, std::span<const TensorMeta> physical_inputs);

}  // namespace rill
