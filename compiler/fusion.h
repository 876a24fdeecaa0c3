// Op fusion, a rewrite of the job before its logical graph is built
// (compiler/compiler.cc): bias_add of a rank-1 variable over the last axis
// followed by gelu_tanh, where nothing else reads the sum (no other op, the
// loss, a metric, a fetch, the generator), becomes one bias_gelu_tanh op
// (kernels/ops/bias_gelu.cc) named and placed as the gelu_tanh was: the
// same values bit for bit, without writing the sum and reading it back (a
// transformer's [B, T, 4C] activation, twice a layer). Pairs whose ops lie
// in different groups or recompute groups, or whose sum has an SBP hint,
// are left as they are.
#pragma once

#include "graph/job.h"

namespace rill::compiler {

graph::Job fuse_ops(graph::Job job);

}  // namespace rill::compiler
