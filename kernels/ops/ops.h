// Declarations of every built-in OpDef, one per op type, defined in the
// files of this folder and listed in kernels/registry.cc.
#pragma once

#include "kernels/op.h"

namespace rill {

extern const OpDef kMatmulOp;
// OP-DECLS

}  // namespace rill
