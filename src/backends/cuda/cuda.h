// What every piece of the CUDA backend shares: the per-replica context a
// layer's CUDA implementation runs in, and the checks that turn CUDA, cuBLAS,
// cuDNN and NCCL errors into dp::Error with the library's own message.
// Compiled only when the meson option `cuda` is on (DP_HAVE_CUDA).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/hd.h"
#include "tensor/tensor.h"


namespace dp {

// One replica's view of its GPU. Every kernel, copy and library call of a
// replica goes to `stream`; the cuBLAS and cuDNN handles are the replica's
// own and are bound to that stream, so replicas never serialise on a handle.
struct CudaCtx {
  int device = 0;                   // CUDA ordinal
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  // math mode: TF32 only when allow_tf32
  cudnnHandle_t cudnn = nullptr;
  Allocator* alloc = nullptr;       // the device's caching allocator
  bool allow_tf32 = false;          // DP_GROUP_ALLOW_TF32; cuDNN convolutions honour it too
  bool cudnn_benchmark = false;     // DP_GROUP_CUDNN_BENCHMARK: time convolution algorithms
  int precision = DP_PRECISION_FP32;  // DP_GROUP_PRECISION: 16-bit products (ops/lowp.h)
};

// "<what> failed: <message> (<name>)" as DP_ERR_DEVICE (DP_ERR_OUT_OF_MEMORY
// for an allocation failure). `what` is the call, as written in the source.
[[noreturn]] void cuda_fail(cudaError_t e, const char* what);
[[noreturn]] void cublas_fail(cublasStatus_t s, const char* what);
[[noreturn]] void cudnn_fail(cudnnStatus_t s, const char* what);

}  // namespace dp

#define DP_CUDA_CHECK(call)                                     \
  do {                                                          \
    cudaError_t dp_e_ = (call);                                 \
    if (dp_e_ != cudaSuccess) ::dp::cuda_fail(dp_e_, #call);    \
  } while (0)
#define DP_CUBLAS_CHECK(call)                                              \
  do {                                                                     \
    cublasStatus_t dp_s_ = (call);                                         \
    if (dp_s_ != CUBLAS_STATUS_SUCCESS) ::dp::cublas_fail(dp_s_, #call);   \
  } while (0)
#define DP_CUDNN_CHECK(call)                                               \
  do {                                                                     \
    cudnnStatus_t dp_s_ = (call);                                          \
    if (dp_s_ != CUDNN_STATUS_SUCCESS) ::dp::cudnn_fail(dp_s_, #call);     \
  } while (0)
// After a kernel launch: a bad configuration is reported at once.
#define DP_CUDA_LAUNCHED() DP_CUDA_CHECK(cudaGetLastError())

namespace dp {

// Blocks for a grid-stride loop over n elements.
inline unsigned cuda_blocks(int64_t n, int threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535 * 8) b = 65535 * 8;
  return static_cast<unsigned>(b);
}

}  // namespace dp
