// Page-locked host memory that only grows: the staging area for copies
// between the host and the GPUs, which are asynchronous only from pinned memory.
#pragma once
#include <cstddef>

#include "backends/cuda/cuda.h"

namespace dp {

class Pinned {
 public:
  Pinned() = default;
  ~Pinned() {
    if (p_) cudaFreeHost(p_);
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;

  // At least `bytes`; the contents are lost when it grows.
  char* reserve(size_t bytes) {
    if (bytes > size_) {
      if (p_) cudaFreeHost(p_);
      p_ = nullptr;
      size_ = 0;
      DP_CUDA_CHECK(cudaHostAlloc(&p_, bytes + bytes / 4, cudaHostAllocPortable));
      size_ = bytes + bytes / 4;
    }
    return static_cast<char*>(p_);
  }
  char* data() { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dp
