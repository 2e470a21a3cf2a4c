#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/ops/lowp.h"

namespace dp {

namespace {

__device__ inline __nv_bfloat16 narrow(float v, __nv_bfloat16*) { return __float2bfloat16_rn(v); }
__device__ inline __half narrow(float v, __half*) { return __float2half_rn(v); }
__device__ inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float widen(__half v) { return __half2float(v); }

template <class T>
__global__ void to_lowp(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = narrow(src[i], static_cast<T*>(nullptr));
}

template <class T>
__global__ void from_lowp(const T* __restrict__ src, float* __restrict__ dst, int64_t n, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = add ? dst[i] + widen(src[i]) : widen(src[i]);
}

// A [c, p] block of floats to a [p, c] block of 16-bit values (blockIdx.z
// the block), through a 32 x 32 tile so that reads and writes both run along
// rows; blockDim (32, 8).
template <class T>
__global__ void to_lowp_cl(const float* __restrict__ src, T* __restrict__ dst, int64_t c, int64_t p, int64_t b0) {
  __shared__ float tile[32][33];
  const int64_t off = (b0 + blockIdx.z) * c * p;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * 32, c0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int64_t ci = c0 + i, pi = p0 + threadIdx.x;
    if (ci < c && pi < p) tile[i][threadIdx.x] = src[off + ci * p + pi];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int64_t pi = p0 + i, ci = c0 + threadIdx.x;
    if (ci < c && pi < p) dst[off + pi * c + ci] = narrow(tile[threadIdx.x][i], static_cast<T*>(nullptr));
  }
}

// The way back: a [p, c] block of 16-bit values to a [c, p] block of floats.
template <class T>
__global__ void from_lowp_cl(const T* __restrict__ src, float* __restrict__ dst, int64_t c, int64_t p, int64_t b0,
                             bool add) {
  __shared__ float tile[32][33];
  const int64_t off = (b0 + blockIdx.z) * c * p;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * 32, c0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int64_t pi = p0 + i, ci = c0 + threadIdx.x;
    if (ci < c && pi < p) tile[i][threadIdx.x] = widen(src[off + pi * c + ci]);
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int64_t ci = c0 + i, pi = p0 + threadIdx.x;
    if (ci < c && pi < p) {
      const float v = tile[threadIdx.x][i];
      float& d = dst[off + ci * p + pi];
      d = add ? d + v : v;
    }
  }
}

// Launches f(grid, b0) over b blocks, at most 65535 per grid (gridDim.z's limit).
template <class F>
void over_blocks(int64_t b, int64_t c, int64_t p, F f) {
  if (b <= 0 || c <= 0 || p <= 0) return;
  if ((c + 31) / 32 > 65535) fail(DP_ERR_SHAPE, "a channels-last conversion of " + std::to_string(c) + " channels");
  for (int64_t b0 = 0; b0 < b; b0 += 65535) {
    const int64_t nb = b - b0 < 65535 ? b - b0 : 65535;
    f(dim3(static_cast<unsigned>((p + 31) / 32), static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(nb)), b0);
  }
}

void check_precision(int precision) {
  if (!low_precision(precision)) fail(DP_ERR_INTERNAL, "a 16-bit conversion for precision " + std::to_string(precision));
}

}  // namespace

cudaDataType_t cublas_lowp_type(int precision) {
  check_precision(precision);
  return precision == DP_PRECISION_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

cudnnDataType_t cudnn_lowp_type(int precision) {
  check_precision(precision);
  return precision == DP_PRECISION_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

void cuda_to_lowp(cudaStream_t s, int precision, const float* src, void* dst, int64_t n) {
  check_precision(precision);
  if (n <= 0) return;
  if (precision == DP_PRECISION_BF16)
    to_lowp<<<cuda_blocks(n), 256, 0, s>>>(src, static_cast<__nv_bfloat16*>(dst), n);
  else
    to_lowp<<<cuda_blocks(n), 256, 0, s>>>(src, static_cast<__half*>(dst), n);
  DP_CUDA_LAUNCHED();
}

void cuda_from_lowp(cudaStream_t s, int precision, const void* src, float* dst, int64_t n, bool add) {
  check_precision(precision);
  if (n <= 0) return;
  if (precision == DP_PRECISION_BF16)
    from_lowp<<<cuda_blocks(n), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(src), dst, n, add);
  else
    from_lowp<<<cuda_blocks(n), 256, 0, s>>>(static_cast<const __half*>(src), dst, n, add);
  DP_CUDA_LAUNCHED();
}

void cuda_to_lowp_channels_last(cudaStream_t s, int precision, const float* src, void* dst, int64_t b, int64_t c,
                                int64_t p) {
  check_precision(precision);
  over_blocks(b, c, p, [&](dim3 grid, int64_t b0) {
    if (precision == DP_PRECISION_BF16)
      to_lowp_cl<<<grid, dim3(32, 8), 0, s>>>(src, static_cast<__nv_bfloat16*>(dst), c, p, b0);
    else
      to_lowp_cl<<<grid, dim3(32, 8), 0, s>>>(src, static_cast<__half*>(dst), c, p, b0);
    DP_CUDA_LAUNCHED();
  });
}

void cuda_from_lowp_channels_last(cudaStream_t s, int precision, const void* src, float* dst, int64_t b, int64_t c,
                                  int64_t p, bool add) {
  check_precision(precision);
  over_blocks(b, c, p, [&](dim3 grid, int64_t b0) {
    if (precision == DP_PRECISION_BF16)
      from_lowp_cl<<<grid, dim3(32, 8), 0, s>>>(static_cast<const __nv_bfloat16*>(src), dst, c, p, b0, add);
    else
      from_lowp_cl<<<grid, dim3(32, 8), 0, s>>>(static_cast<const __half*>(src), dst, c, p, b0, add);
    DP_CUDA_LAUNCHED();
  });
}

void* lowp_buffer(Tensor& t, int64_t n) {
  const int64_t floats = (n + 1) / 2 > 0 ? (n + 1) / 2 : 1;
  if (t.numel() < floats || t.data() == nullptr) t.resize(DP_F32, Shape{floats});
  return t.data();
}

}  // namespace dp
