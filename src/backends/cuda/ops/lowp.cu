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

void* lowp_buffer(Tensor& t, int64_t n) {
  const int64_t floats = (n + 1) / 2 > 0 ? (n + 1) / 2 : 1;
  if (t.numel() < floats || t.data() == nullptr) t.resize(DP_F32, Shape{floats});
  return t.data();
}

}  // namespace dp
