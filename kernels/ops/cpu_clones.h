// RILL_CPU_CLONES marks a CPU kernel's hot loop to be compiled once per
// instruction set beside the baseline (AVX-512, AVX2), the copy for the CPU
// it runs on picked when the program loads (GCC's and Clang's
// target_clones), as PyTorch dispatches its CPU kernels: the build runs on
// any x86-64, and a loop of GELU's rational tanh runs 10x faster on AVX-512
// than the baseline's. Every copy gives the baseline's bits on the same
// machine: the loops are elementwise IEEE operations in source order (the
// build keeps floating-point contraction off, so no copy fuses a multiply
// and an add, and nothing reassociates a sum). Calls into libm (erff, expf,
// tanhf) are the library's, which may itself pick code by CPU.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define RILL_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RILL_CPU_CLONES
#endif
