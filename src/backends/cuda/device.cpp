#include "backends/cuda/device.h"

#include <cstdio>

namespace dp {

int cuda_device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    // Without any NVIDIA driver (a machine with no GPU) the runtime says the
    // driver is "insufficient": say which case it may be.
    const std::string hint = e == cudaErrorInsufficientDriver
                                 ? "; no NVIDIA driver is loaded (no GPU here?), or it is older than this build's CUDA "
                                   "runtime"
                                 : "";
    if (why)
      *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")" + hint;
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)";
  return n;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp p{};
  DP_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char buf[384];
  std::snprintf(buf, sizeof buf, "%s, %.1f GiB, compute capability %d.%d", p.name,
                static_cast<double>(p.totalGlobalMem) / (1 << 30), p.major, p.minor);
  return buf;
}

CudaStream::CudaStream(int device, bool allow_tf32) {
  alloc_ = make_cuda_allocator(device);
  ctx_.device = device;
  ctx_.alloc = alloc_.get();
  DP_CUDA_CHECK(cudaSetDevice(device));
  try {
    DP_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
    DP_CUBLAS_CHECK(cublasCreate(&ctx_.cublas));
    DP_CUBLAS_CHECK(cublasSetStream(ctx_.cublas, ctx_.stream));
    DP_CUDNN_CHECK(cudnnCreate(&ctx_.cudnn));
    DP_CUDNN_CHECK(cudnnSetStream(ctx_.cudnn, ctx_.stream));
    set_allow_tf32(allow_tf32);
  } catch (...) {
    this->~CudaStream();
    throw;
  }
}

CudaStream::~CudaStream() {
  if (ctx_.stream) {
    cudaSetDevice(ctx_.device);
    cudaStreamSynchronize(ctx_.stream);
  }
  if (ctx_.cudnn) cudnnDestroy(ctx_.cudnn);
  if (ctx_.cublas) cublasDestroy(ctx_.cublas);
  if (ctx_.stream) cudaStreamDestroy(ctx_.stream);
  ctx_.cudnn = nullptr;
  ctx_.cublas = nullptr;
  ctx_.stream = nullptr;
}

// PyTorch's default since 1.12: float32 products in full precision unless
// TF32 is asked for.
void CudaStream::set_allow_tf32(bool allow) {
  ctx_.allow_tf32 = allow;
  DP_CUBLAS_CHECK(cublasSetMathMode(ctx_.cublas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

void CudaStream::synchronize() { DP_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream)); }

}  // namespace dp
