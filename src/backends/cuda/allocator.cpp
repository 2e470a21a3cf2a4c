// The caching allocators (device.h). Size classes: multiples of
// 512 bytes up to 1 MiB, then multiples of 2 MiB, so a tensor that grows a
// little reuses its class and large blocks waste at most 2 MiB.
#include <cstdint>
#include <map>
#include <new>
#include <mutex>
#include <vector>

#include "backends/cuda/device.h"

namespace dp {

namespace {

size_t size_class(size_t bytes) {
  const size_t small = 512, large = size_t(2) << 20;
  if (bytes <= (size_t(1) << 20)) return (bytes + small - 1) / small * small;
  if (bytes > SIZE_MAX - large) throw std::bad_alloc();  // rounding up would wrap to a small block
  return (bytes + large - 1) / large * large;
}

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator() override { release_cached(); }

  void* allocate(size_t bytes) override {
    size_t cls = size_class(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = free_[cls];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      return p;
    }
    int prev = 0;
    DP_CUDA_CHECK(cudaGetDevice(&prev));
    DP_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, cls);
    if (e == cudaErrorMemoryAllocation) {  // give the cached blocks back and try once more
      cudaGetLastError();
      release_cached();
      e = cudaMalloc(&p, cls);
    }
    cudaSetDevice(prev);
    if (e != cudaSuccess)
      cuda_fail(e, ("cudaMalloc of " + std::to_string(cls) + " bytes on cuda:" + std::to_string(device_)).c_str());
    return p;
  }

  // Blocks go back to their class's free list, for the next allocation of
  // the same owner: work queued on its stream that still reads the old
  // block runs before any later work that writes the new one.
  void release(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    free_[size_class(bytes)].push_back(p);
  }

 private:
  void release_cached() {
    for (auto& kv : free_)
      for (void* p : kv.second) cudaFree(p);
    free_.clear();
  }

  int device_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
};

}  // namespace

namespace {
class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    DP_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
    return p;
  }
  void release(void* p, size_t) override { cudaFreeHost(p); }
};
}  // namespace

Allocator* cuda_pinned_allocator() {
  std::string why;
  if (cuda_device_count(&why) == 0) fail(DP_ERR_DEVICE, "pinned memory: " + why);
  static PinnedAllocator pinned;
  return &pinned;
}

std::unique_ptr<Allocator> make_cuda_allocator(int device) { return std::make_unique<CachingAllocator>(device); }

}  // namespace dp
