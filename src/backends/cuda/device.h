// CUDA devices: what is there, and the per-device and per-replica resources.
// Declared without CUDA types where the rest of dp (group, C API, CLI) needs
// them; absent.cpp implements the first two when the build has no CUDA.
#pragma once
#include <memory>
#include <string>

namespace dp {

// GPUs this process can use; 0 with *why saying why there are none (no CUDA
// backend in this build, no driver, no device visible).
int cuda_device_count(std::string* why);

// "NVIDIA H200, 139.8 GiB, compute capability 9.0"; throws DP_ERR_DEVICE.
std::string cuda_device_name(int device);

class Allocator;
// Page-locked host memory (cudaHostAlloc), for tensors that GPUs copy from
// asynchronously and without a staging copy (PyTorch's pin_memory). Throws
// DP_ERR_DEVICE with the reason when there is no usable GPU.
Allocator* cuda_pinned_allocator();

}  // namespace dp

#ifdef DP_HAVE_CUDA
#include "backends/cuda/cuda.h"

namespace dp {

// A caching allocator of device memory: blocks are rounded up to size
// classes and go back to free lists, not to cudaFree (until the allocator
// goes), so a training step that reuses its tensors calls cudaMalloc only
// while its buffers first grow. A freed block is reused without waiting, so
// one allocator serves one stream (or work ordered with it): each replica
// has its own. Thread-safe.
std::unique_ptr<Allocator> make_cuda_allocator(int device);

// One replica's stream, library handles (bound to the stream) and allocator,
// as a CudaCtx. Made once per replica; the destructor synchronises the
// stream. Tensors from ctx()->alloc must go before it.
class CudaStream {
 public:
  CudaStream(int device, bool allow_tf32);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  CudaCtx* ctx() { return &ctx_; }
  void set_allow_tf32(bool allow);
  void synchronize();

 private:
  std::unique_ptr<Allocator> alloc_;
  CudaCtx ctx_;
};

}  // namespace dp
#endif
