/* swish's CUDA code (dp_plugin.h version 2): the same formulas as swish.c's
 * CPU loops, on the replica's stream, with beta read on the GPU. Built into
 * swish.so when dp is configured with CUDA (plugins/meson.build); needs only
 * dp_plugin.h and the CUDA runtime. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "dp_plugin.h"
#include "swish_cuda.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

__device__ float sigmoid_of(float beta, float x) { return 1.f / (1.f + expf(-beta * x)); }

__global__ void forward_kernel(const float* __restrict__ x, float* __restrict__ y, const float* __restrict__ beta,
                               int64_t n) {
  const float b = beta[0];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[i] / (1.f + expf(-b * x[i]));  // as swish.c writes it
}

// The input's gradient, and each block's part of d loss / d beta (in double,
// in a fixed order: the same sum on every run for the same n).
__global__ void backward_kernel(const float* __restrict__ x, const float* __restrict__ g, float* __restrict__ gx,
                                const float* __restrict__ beta, double* __restrict__ partial, int64_t n) {
  __shared__ double sum[kThreads];
  const float b = beta[0];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float s = sigmoid_of(b, x[i]);
    if (gx) gx[i] = g[i] * (s + b * x[i] * s * (1.f - s));
    acc += static_cast<double>(g[i]) * x[i] * x[i] * s * (1.f - s);
  }
  sum[threadIdx.x] = acc;
  __syncthreads();
  for (int k = kThreads / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) sum[threadIdx.x] += sum[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sum[0];
}

// grads[0] += the blocks' parts, summed in a fixed order (one block).
__global__ void add_partials(const double* __restrict__ partial, int parts, float* __restrict__ grad) {
  __shared__ double sum[kThreads];
  double acc = 0;
  for (int i = threadIdx.x; i < parts; i += kThreads) acc += partial[i];
  sum[threadIdx.x] = acc;
  __syncthreads();
  for (int k = kThreads / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) sum[threadIdx.x] += sum[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) grad[0] += static_cast<float>(sum[0]);
}

int launched(const char* what, char* err, size_t cap) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return 0;
  snprintf(err, cap, "%s: %s", what, cudaGetErrorString(e));
  return 1;
}

}  // namespace

extern "C" int swish_cuda_forward(const dp_host_api* api, const dp_plugin_run* run, const dp_plugin_io* io, char* err,
                                  size_t cap) {
  (void)api;
  int64_t n = dp_plugin_numel(&io->output);
  if (n == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(run->stream);
  forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(io->inputs[0].data),
                                                   static_cast<float*>(io->output.data), io->params, n);
  return launched("swish forward kernel", err, cap);
}

extern "C" int swish_cuda_backward(const dp_host_api* api, const dp_plugin_run* run, const dp_plugin_io* io, char* err,
                                   size_t cap) {
  int64_t n = dp_plugin_numel(&io->grad_output);
  if (n == 0) return 0;
  int blocks = blocks_for(n);
  double* partial = static_cast<double*>(api->scratch(run, 0, sizeof(double) * blocks));
  if (!partial) return snprintf(err, cap, "out of GPU memory for %d partial sums", blocks), 1;
  cudaStream_t s = static_cast<cudaStream_t>(run->stream);
  backward_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(io->inputs[0].data),
                                              static_cast<const float*>(io->grad_output.data),
                                              static_cast<float*>(io->grad_inputs[0].data), io->params, partial, n);
  add_partials<<<1, kThreads, 0, s>>>(partial, blocks, io->grads);
  return launched("swish backward kernels", err, cap);
}
