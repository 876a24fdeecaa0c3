// How the CUDA module exports an op's CUDA kernel: RILL_CUDA_KERNEL(name)
// begins the kernel's host side, a function with the CPU kernels' signature
// exported unmangled as rill_cuda_<name>, which the loader finds for every
// op whose OpDef::cuda names it (kernels/cuda/cuda_loader.cc). The kernel
// turns its KernelContext into work on ctx.cuda's stream and returns
// without waiting. No list of kernels exists besides the OpDefs.
#pragma once

#include "kernels/op.h"

#define RILL_CUDA_KERNEL(name) \
  extern "C" __attribute__((visibility("default"))) ::rill::Status rill_cuda_##name(::rill::KernelContext& ctx)
