// The engine's own kernels: gradient sums and the fused optimizer update.
#pragma once
#include <cstdint>

#include "backends/cuda/cuda.h"
#include "optim/rules.h"

namespace dp {

constexpr int kMaxReplicasPerDevice = 16;

// dst[0, n) += src[0, n).
void cuda_add(cudaStream_t s, float* dst, const float* src, int64_t n);
// dst[i] = src[0][i] + src[1][i] + ... (k >= 1 sources, in that order; k = 0
// zeroes dst). dst may be src[0].
void cuda_sum(cudaStream_t s, float* dst, const float* const* src, int k, int64_t n);
// acc[i] += step[i] (step may be null), then, with a rule, one optimizer step
// on params from acc, using state0/state1 (momentum buffer; Adam's m and v).
void cuda_update(cudaStream_t s, float* params, float* acc, const float* step, const OptimRule* rule, float* state0,
                 float* state1, int64_t n);

// clip_grad_norm_: the sum of x[0, n)'s squares, in double and in a fixed
// order (kNormBlocks grid-stride partial sums, then one block's tree), into
// scratch[kNormBlocks]; scratch holds kNormBlocks + 1 doubles on the device.
constexpr int kNormBlocks = 256;
void cuda_sum_squares(cudaStream_t s, const float* x, int64_t n, double* scratch);
// x[0, n) *= k.
void cuda_scale(cudaStream_t s, float* x, float k, int64_t n);

}  // namespace dp
