#include "kernels/ops/cpu_kernels_info.h"

#include <cblas.h>

#include <cstdlib>
#include <string_view>

#include "kernels/ops/cpu_clones.h"

namespace rill {

CpuKernels cpu_kernels() {
  CpuKernels k;
  k.loops = cpu_clones::isa_name(cpu_clones::active_isa());
  const char* core = openblas_get_corename();
  k.blas = core != nullptr ? core : "unknown";
  return k;
}

std::string better_blas_core() {
#if RILL_CPU_CLONES_X86
  const char* own = openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || own == nullptr || std::string_view(own) != "Prescott") return {};
  // No better than the loops' copy (RILL_CPU_ISA caps both).
  const cpu_clones::Isa isa = cpu_clones::active_isa();
  __builtin_cpu_init();
  if (isa == cpu_clones::Isa::kAvx512 && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if ((isa == cpu_clones::Isa::kAvx512 || isa == cpu_clones::Isa::kAvx2) && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return "Haswell";
#endif
  return {};
}

}  // namespace rill
