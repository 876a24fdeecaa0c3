#include "kernels/ops/cpu_kernels_info.h"

#include <cblas.h>

#include "kernels/ops/cpu_clones.h"

namespace rill {

CpuKernels cpu_kernels() {
  CpuKernels k;
  k.loops = cpu_clones::isa_name(cpu_clones::active_isa());
  const char* core = openblas_get_corename();
  k.blas = core != nullptr ? core : "unknown";
  return k;
}

}  // namespace rill
