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
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
  return {};
}

}  // namespace rill
