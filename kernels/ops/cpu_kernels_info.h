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

// The OpenBLAS core type this process should name in OPENBLAS_CORETYPE, or
// "" to keep OpenBLAS's own. OpenBLAS picks its kernels by the CPU's model
// when it loads, before main, and takes its generic Prescott kernels for a
// model newer than the library (Debian 12's 0.3.21 on Sapphire and Emerald
// Rapids): GEMMs 3-4x slower than the CPU runs. Where OPENBLAS_CORETYPE is
// unset and OpenBLAS took Prescott, the best core whose instructions this
// CPU and its OS execute (SkylakeX: AVX-512 F, DQ, BW and VL; Haswell: AVX2
// and FMA), as newer OpenBLAS releases pick by features, and no better than
// the copy of Rill's loops that runs (RILL_CPU_ISA=avx2 caps it at Haswell,
// baseline keeps Prescott). A value the user set, even Prescott, is kept.
std::string better_blas_core();

}  // namespace rill
