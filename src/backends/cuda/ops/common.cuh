// Pieces several ops (and the engine's kernels) share: owned cuDNN descriptors, warp and block reductions.
#pragma once
#include "backends/cuda/cuda.h"
#include "layers/layer.h"

namespace dp {

// A cuDNN descriptor the op owns: created with the op, destroyed without throwing.
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
struct CudnnDesc {
  T d = nullptr;
  CudnnDesc() { DP_CUDNN_CHECK(Create(&d)); }
  ~CudnnDesc() {
    if (d) Destroy(d);
  }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
};
using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDesc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = CudnnDesc<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;

// The start of a one-input backward: io.gin[0] resized to the input's shape,
// or null when no input gradient is wanted or there is nothing to compute.
inline Tensor* input_grad(LayerIO& io) {
  Tensor* gin = io.gin.empty() ? nullptr : io.gin[0];
  if (!gin) return nullptr;
  gin->resize(DP_F32, io.in[0]->shape());
  return gin->numel() == 0 ? nullptr : gin;
}

#ifdef __CUDACC__
// Butterflies over a full warp: every lane ends with the same bits.
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = v < w ? w : v;
  }
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of every thread's `a` in a block of kSumThreads threads, by a
// fixed tree: the same bits on every run (losses, clip_grad_norm_'s norm).
constexpr int kSumThreads = 256;
__device__ inline double block_sum(double a) {
  __shared__ double s[kSumThreads];
  s[threadIdx.x] = a;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  return s[0];
}
#endif

}  // namespace dp
