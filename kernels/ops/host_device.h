// RILL_HOST_DEVICE marks scalar math shared by the CPU kernels (*.cc) and the
// CUDA kernels (*.cu), so that both compute one formula.
#pragma once

#ifdef __CUDACC__
#define RILL_HOST_DEVICE __host__ __device__
#else
#define RILL_HOST_DEVICE
#endif
