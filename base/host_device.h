// RILL_HOST_DEVICE marks scalar math shared by host code and the CUDA
// kernels (*.cu), so that both compute one formula (the kernels' math
// headers, 16-bit float conversions).
#pragma once

#ifdef __CUDACC__
#define RILL_HOST_DEVICE __host__ __device__
#else
#define RILL_HOST_DEVICE
#endif
