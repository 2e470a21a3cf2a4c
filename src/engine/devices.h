// The one header through which the parts of dp above the engines (the C API,
// the data loader) ask about devices. Implemented by the CUDA backend
// (backends/cuda/device.cpp), or by backends/cuda/absent.cpp when the build
// has none. CPU devices need no query: they are threads.
#pragma once
#include <string>

namespace dp {

class Allocator;

// GPUs this process can use; 0 with *why saying why there are none (no CUDA
// backend in this build, no driver, no device visible).
int cuda_device_count(std::string* why);

// "NVIDIA H200, 139.8 GiB, compute capability 9.0"; throws DP_ERR_DEVICE.
std::string cuda_device_name(int device);

// Page-locked host memory (cudaHostAlloc), for tensors that GPUs copy from
// asynchronously and without a staging copy (PyTorch's pin_memory). Throws
// DP_ERR_DEVICE with the reason when there is no usable GPU.
Allocator* cuda_pinned_allocator();

}  // namespace dp
