// RINGTRAIN_HOST_DEVICE: a function both the CPU code and CUDA kernels call (the same arithmetic
// on both sides, e.g. model/dropout_mask.h and model/pool_math.h). Empty outside nvcc, so such
// headers need no CUDA to include.
#pragma once

#if defined(__CUDACC__)
#define RINGTRAIN_HOST_DEVICE __host__ __device__
#else
#define RINGTRAIN_HOST_DEVICE
#endif
