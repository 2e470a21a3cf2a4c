// cross_entropy and mse on the GPU, and the count of correct predictions.
// Each loss writes its rows' share of the batch loss to *loss, as the CPU
// returns it: sum over its rows / batch_total. Sums are in double, as on the
// CPU, and reduced in a fixed order (per row or per block first, then one
// block's fixed tree), never with float atomics: the same loss on every run.
#include <math_constants.h>

#include "backends/cuda/ops/common.cuh"
#include "backends/cuda/ops/ops.h"
#include "layers/loss_cross_entropy.h"
#include "layers/loss_mse.h"

namespace dp {

namespace {

constexpr int kWarpsPerBlock = 8;

// One block of kSumThreads: *loss = sum(v[0..n)) / denom.
__global__ void sum_to_loss(const double* __restrict__ v, int64_t n, double denom, float* loss) {
  double a = 0;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) a += v[i];
  a = block_sum(a);
  if (threadIdx.x == 0) *loss = static_cast<float>(a / denom);
}

// A warp per row of logits x [n, C]: row_loss[r] and, when g is set, the
// row's gradient, with the CPU's formulas (loss_cross_entropy.cpp). A target
// outside [0, C) cannot be reported from here (that would need a host sync),
// so its row's loss and gradient are NaN rather than a read out of bounds.
__global__ void cross_entropy_rows(const float* __restrict__ x, const int64_t* __restrict__ t, float* __restrict__ g,
                                   double* __restrict__ row_loss, int64_t n, int64_t C, double ls, double total,
                                   double scale) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; r < n;
       r += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const float* xr = x + r * C;
    const int64_t tr = t[r];
    const bool ok = tr >= 0 && tr < C;
    float mx = -INFINITY;
    for (int64_t c = lane; c < C; c += 32) mx = mx < xr[c] ? xr[c] : mx;  // std::max(mx, x), as on the CPU
    mx = warp_max(mx);
    double se = 0, sx = 0;
    for (int64_t c = lane; c < C; c += 32) {
      se += exp(static_cast<double>(xr[c]) - mx);
      sx += xr[c];
    }
    se = warp_sum(se);
    sx = warp_sum(sx);
    const double lse = mx + log(se);
    if (lane == 0) {
      double lr = ok ? (1 - ls) * (lse - xr[tr]) : CUDART_NAN;
      if (ls > 0) lr += ls / static_cast<double>(C) * (static_cast<double>(C) * lse - sx);
      row_loss[r] = lr;
    }
    if (g) {
      float* gr = g + r * C;
      const double off = ls / static_cast<double>(C);
      for (int64_t c = lane; c < C; c += 32) {
        const double p = exp(static_cast<double>(xr[c]) - lse);
        const double y = off + (c == tr ? 1 - ls : 0);
        gr[c] = ok ? static_cast<float>((p - y) / total * scale) : CUDART_NAN_F;
      }
    }
  }
}

// Per block: the sum of (x - t)^2 over its grid-stride elements, in double;
// and g = k (x - t) when g is set, as on the CPU (loss_mse.cpp).
__global__ void mse_blocks(const float* __restrict__ x, const float* __restrict__ t, float* __restrict__ g,
                           double* __restrict__ part, int64_t n, float k) {
  double a = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kSumThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kSumThreads) {
    const double d = static_cast<double>(x[i]) - t[i];
    a += d * d;
    if (g) g[i] = k * (x[i] - t[i]);
  }
  a = block_sum(a);
  if (threadIdx.x == 0) part[blockIdx.x] = a;
}

// Doubles of scratch in the replica's device memory, kept by the loss (a
// CudaLoss, unlike a CudaOp, has no LayerIO scratch). Only grows.
double* doubles(Tensor& buf, const RunCtx& ctx, int64_t count) {
  if (buf.allocator() != ctx.cuda->alloc) buf = Tensor(ctx.cuda->alloc);
  buf.resize(DP_I64, Shape{count > 0 ? count : 1});  // DP_I64: 8-byte elements
  return static_cast<double*>(buf.data());
}

class CudaCrossEntropy final : public CudaLoss {
 public:
  explicit CudaCrossEntropy(const CrossEntropyAttrs& a) : a_(a) {}

  void forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout,
                        float* loss) override {
    const int64_t n = out.shape()[0], C = out.shape().inner();
    if (target.dtype() != DP_I64 || target.numel() != n)
      fail(DP_ERR_SHAPE, std::string("cross_entropy expects int64 targets of shape [") + std::to_string(n) + "], got " +
                             dtype_name(target.dtype()) + " " + target.shape().str());
    float* g = nullptr;
    if (gout) {
      gout->resize(DP_F32, out.shape());
      g = gout->f32();
    }
    const double total = static_cast<double>(ctx.batch_total > 0 ? ctx.batch_total : n);
    cudaStream_t s = ctx.cuda->stream;
    double* rows = doubles(rows_, ctx, n);
    if (n > 0) {
      const int64_t b = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
      const unsigned blocks = static_cast<unsigned>(b > 65535 * 8 ? 65535 * 8 : b);
      cross_entropy_rows<<<blocks, 32 * kWarpsPerBlock, 0, s>>>(out.f32(), target.i64(), g, rows, n, C,
                                                                  a_.smoothing_, total, ctx.loss_scale);
      DP_CUDA_LAUNCHED();
    }
    sum_to_loss<<<1, kSumThreads, 0, s>>>(rows, n, total, loss);
    DP_CUDA_LAUNCHED();
  }

 private:
  const CrossEntropyAttrs& a_;  // the model's loss, which outlives its replicas' losses
  Tensor rows_;                 // per-row losses
};

class CudaMse final : public CudaLoss {
 public:
  void forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout,
                        float* loss) override {
    const int64_t n = out.shape()[0], inner = out.shape().inner(), numel = n * inner;
    const double denom = static_cast<double>(ctx.batch_total > 0 ? ctx.batch_total : n) * static_cast<double>(inner);
    if (target.dtype() != DP_F32 || target.numel() != numel)
      fail(DP_ERR_SHAPE, "mse expects float32 targets of shape " + out.shape().str() + ", got " +
                             dtype_name(target.dtype()) + " " + target.shape().str());
    float* g = nullptr;
    if (gout) {
      gout->resize(DP_F32, out.shape());
      g = gout->f32();
    }
    // The block count depends on numel only, so the order of the sum does too.
    int64_t blocks = (numel + kSumThreads - 1) / kSumThreads;
    blocks = blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks;
    double* part = doubles(part_, ctx, blocks);
    cudaStream_t s = ctx.cuda->stream;
    mse_blocks<<<static_cast<unsigned>(blocks), kSumThreads, 0, s>>>(out.f32(), target.f32(), g, part, numel,
                                                                     static_cast<float>(2.0 / denom * ctx.loss_scale));
    DP_CUDA_LAUNCHED();
    sum_to_loss<<<1, kSumThreads, 0, s>>>(part, blocks, denom, loss);
    DP_CUDA_LAUNCHED();
  }

 private:
  Tensor part_;  // per-block sums
};

// A thread per row, scanning as Replica::correct does (the first maximum;
// a NaN never wins), then an integer sum: atomics on integers are exact.
__global__ void count_rows(const float* __restrict__ x, const int64_t* __restrict__ t, int64_t n, int64_t C,
                           unsigned long long* count) {
  unsigned long long hits = 0;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < n;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* xr = x + r * C;
    int64_t best = 0;
    for (int64_t c = 1; c < C; ++c)
      if (xr[c] > xr[best]) best = c;
    hits += best == t[r];
  }
  for (int o = 16; o > 0; o >>= 1) hits += __shfl_down_sync(0xffffffffu, hits, o);
  if ((threadIdx.x & 31) == 0 && hits) atomicAdd(count, hits);
}

}  // namespace

std::unique_ptr<CudaLoss> make_cuda_cross_entropy(const Loss& loss) {
  const auto* a = dynamic_cast<const CrossEntropyAttrs*>(&loss);
  if (!a) return nullptr;
  // (With the default ignore_index, -100, a target of -100 is refused on a
  // GPU by the range check of every step: CudaEngine::prepare.)
  if (!a->weight_.empty() || a->ignore_index_ != -100)
    fail(DP_ERR_MODEL, "/loss: cross_entropy's weight and ignore_index run on CPU devices only so far: "
                       "train this model on cpu:N, or without them on a GPU");
  return std::make_unique<CudaCrossEntropy>(*a);
}

std::unique_ptr<CudaLoss> make_cuda_mse(const Loss& loss) {
  if (!dynamic_cast<const MseAttrs*>(&loss)) return nullptr;
  return std::make_unique<CudaMse>();
}

void cuda_count_correct(const RunCtx& ctx, const Tensor& out, const Tensor& target, int64_t* count) {
  cudaStream_t s = ctx.cuda->stream;
  DP_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int64_t), s));
  if (target.dtype() != DP_I64 || out.shape().ndim != 2) return;
  const int64_t n = out.shape()[0], C = out.shape()[1];
  if (n == 0) return;
  count_rows<<<cuda_blocks(n), 256, 0, s>>>(out.f32(), target.i64(), n, C,
                                             reinterpret_cast<unsigned long long*>(count));
  DP_CUDA_LAUNCHED();
}

}  // namespace dp
