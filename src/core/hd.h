// DP_HD marks a function that host code and CUDA kernels share, so a formula
// (an activation, a random stream, an optimizer rule) is written once and the
// CPU and GPU backends compute the same thing.
#pragma once
#ifdef __CUDACC__
#define DP_HD __host__ __device__
#else
#define DP_HD
#endif
