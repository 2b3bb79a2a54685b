// host_device.h — ICL_HOST_DEVICE marks a function that the CPU code and the CUDA kernels share, written once:
// __host__ __device__ under nvcc, nothing for the host compiler (src/layers/attention_mods_shared.h, tint_mask.h).
#pragma once

#ifdef __CUDACC__
#define ICL_HOST_DEVICE __host__ __device__
#else
#define ICL_HOST_DEVICE
#endif
