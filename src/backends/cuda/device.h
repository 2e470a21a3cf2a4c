// CUDA devices: the per-device and per-replica resources of the backend.
// The queries the rest of dp needs (device count and name, pinned memory)
// are declared in engine/devices.h.
#pragma once
#include <memory>

#include "engine/devices.h"

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
