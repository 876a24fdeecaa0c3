// Which CPU code runs a job's kernels on this machine: the copy of the
// elementwise loops (cpu_clones.h; RILL_CPU_ISA caps it) and the core type
// whose GEMM kernels OpenBLAS runs (OPENBLAS_CORETYPE chooses it). A run's
// result names both, so a figure from one machine says what it measured.
#pragma once

#include <string>

namespace rill {

struct CpuKernels {
  std::string loops;  // "AVX-512", "AVX2" or "baseline"
  std::string blas;   // OpenBLAS's core name, e.g. "Haswell", "SkylakeX"
};

CpuKernels cpu_kernels();

}  // namespace rill
