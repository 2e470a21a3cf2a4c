// The benchmark plugin relu's CUDA code (tests/plugins/fixtures.c with
// FIXTURE_PLUGIN_RELU and FIXTURE_CUDA_RELU): the element-wise loops of the
// CPU fixture as grid-stride kernels on the replica's stream, as a plugin
// author would write them, to time the plugin path against the built-in relu
// on a GPU (bench/plugin_relu ... cuda:0).
#include <cuda_runtime.h>
#include <stdio.h>

#include "dp_plugin.h"

namespace {

unsigned blocks_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

__global__ void relu_forward(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[i] < 0.f ? 0.f : x[i];
}

__global__ void relu_backward(const float* __restrict__ x, const float* __restrict__ g, float* __restrict__ gx,
                              int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    gx[i] = g[i] * (x[i] > 0.f ? 1.f : 0.f);
}

int launched(char* err, size_t cap) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (snprintf(err, cap, "%s", cudaGetErrorString(e)), 1);
}

}  // namespace

extern "C" int relu_cuda_forward(const void*, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  int64_t n = dp_plugin_numel(&io->output);
  if (n == 0) return 0;
  relu_forward<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(run->stream)>>>(
      static_cast<const float*>(io->inputs[0].data), static_cast<float*>(io->output.data), n);
  return launched(err, cap);
}

extern "C" int relu_cuda_backward(const void*, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  int64_t n = dp_plugin_numel(&io->grad_output);
  if (n == 0 || !io->grad_inputs[0].data) return 0;
  relu_backward<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(run->stream)>>>(
      static_cast<const float*>(io->inputs[0].data), static_cast<const float*>(io->grad_output.data),
      static_cast<float*>(io->grad_inputs[0].data), n);
  return launched(err, cap);
}
