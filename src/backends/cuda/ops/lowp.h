// Mixed precision (DP_GROUP_PRECISION, as torch.autocast): the matrix
// products and convolutions of a replica whose CudaCtx::precision is
// DP_PRECISION_BF16 or _FP16 read their operands rounded to that 16-bit type
// (round to nearest even) and accumulate in float32 on tensor cores; what
// they hand on, the parameters, gradients and every other layer stay float32.
// These are the conversions and the library type codes they need.
#pragma once
#include <cstdint>

#include "backends/cuda/cuda.h"

namespace dp {

// Whether `precision` (a DP_PRECISION_* value) computes products in 16 bits.
inline bool low_precision(int precision) { return precision == DP_PRECISION_BF16 || precision == DP_PRECISION_FP16; }
// cuBLAS's and cuDNN's codes for the 16-bit type of `precision`.
cudaDataType_t cublas_lowp_type(int precision);
cudnnDataType_t cudnn_lowp_type(int precision);

// dst[0, n) = src[0, n) rounded to the 16-bit type of `precision` (2 bytes each).
void cuda_to_lowp(cudaStream_t s, int precision, const float* src, void* dst, int64_t n);
// dst[0, n) = (or, with add, +=) src[0, n), 16-bit values widened to float.
void cuda_from_lowp(cudaStream_t s, int precision, const void* src, float* dst, int64_t n, bool add);
// The same, with the layout changed between channels-first and channels-last
// (conv2d's NHWC path, ops/cudnn_graph.h): src is b blocks of [c, p] floats
// (NCHW: p = H * W; a filter KCRS: b = K, p = R * S), dst b blocks of [p, c]
// 16-bit values; and back, widened (added with add).
void cuda_to_lowp_channels_last(cudaStream_t s, int precision, const float* src, void* dst, int64_t b, int64_t c,
                                int64_t p);
void cuda_from_lowp_channels_last(cudaStream_t s, int precision, const void* src, float* dst, int64_t b, int64_t c,
                                  int64_t p, bool add);
// Scratch tensor t as room for n 16-bit values (grown, never shrunk).
void* lowp_buffer(Tensor& t, int64_t n);

}  // namespace dp
