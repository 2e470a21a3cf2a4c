// softmax and log_softmax on the GPU along any dim: each sample is [outer, D, inner] and a
// "line" is one (outer, inner) index's D values, inner apart, as on the CPU.
// Sums are in double, as on the CPU, and in a fixed order.
//  - inner == 1 (the usual last dim): a warp per line, lanes taking every
//    32nd value, then a butterfly reduction: every lane gets the same sum
//    (double addition commutes), the same on every run.
//  - inner > 1: a thread per line, walking D in the CPU's order; adjacent
//    threads read adjacent addresses.
#include "backends/cuda/ops/common.cuh"
#include "backends/cuda/ops/ops.h"
#include "layers/softmax.h"

namespace dp {

namespace {

constexpr int kWarpsPerBlock = 8;

// Lines [blockIdx.x * kWarpsPerBlock + warp, ...), D contiguous values each.
// kLog: log_softmax, (x - max) - log(sum), as on the CPU.
template <bool kLog>
__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t lines, int64_t D) {
  const int lane = threadIdx.x & 31;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; l < lines;
       l += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const float* xp = x + l * D;
    float* yp = y + l * D;
    float mx = -INFINITY;
    for (int64_t i = lane; i < D; i += 32) mx = mx < xp[i] ? xp[i] : mx;  // std::max(mx, x), as on the CPU
    mx = warp_max(mx);
    double s = 0;
    if (kLog) {
      for (int64_t i = lane; i < D; i += 32) s += expf(xp[i] - mx);
      const float ls = static_cast<float>(log(warp_sum(s)));
      for (int64_t i = lane; i < D; i += 32) yp[i] = (xp[i] - mx) - ls;
    } else {
      for (int64_t i = lane; i < D; i += 32) {
        float v = expf(xp[i] - mx);
        yp[i] = v;
        s += v;
      }
      const float inv = static_cast<float>(1.0 / warp_sum(s));
      for (int64_t i = lane; i < D; i += 32) yp[i] *= inv;
    }
  }
}

template <bool kLog>
__global__ void softmax_rows_backward(const float* __restrict__ y, const float* __restrict__ g,
                                      float* __restrict__ gx, int64_t lines, int64_t D) {
  const int lane = threadIdx.x & 31;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; l < lines;
       l += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t o = l * D;
    if (kLog) {  // g - exp(y) sum(g)
      double sum = 0;
      for (int64_t i = lane; i < D; i += 32) sum += g[o + i];
      const float sg = static_cast<float>(warp_sum(sum));
      for (int64_t i = lane; i < D; i += 32) gx[o + i] = g[o + i] - expf(y[o + i]) * sg;
    } else {
      double dot = 0;
      for (int64_t i = lane; i < D; i += 32) dot += static_cast<double>(y[o + i]) * g[o + i];
      const float d = static_cast<float>(warp_sum(dot));
      for (int64_t i = lane; i < D; i += 32) gx[o + i] = y[o + i] * (g[o + i] - d);
    }
  }
}

// Line t = l * inner + k starts at l * D * inner + k; its values are inner apart.
template <bool kLog>
__global__ void softmax_strided(const float* __restrict__ x, float* __restrict__ y, int64_t lines, int64_t D,
                                int64_t inner) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < lines * inner;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = (t / inner) * D * inner + t % inner;
    const float* xp = x + o;
    float* yp = y + o;
    float mx = -INFINITY;
    for (int64_t i = 0; i < D; ++i) mx = mx < xp[i * inner] ? xp[i * inner] : mx;
    double s = 0;
    if (kLog) {
      for (int64_t i = 0; i < D; ++i) s += expf(xp[i * inner] - mx);
      const float ls = static_cast<float>(log(s));
      for (int64_t i = 0; i < D; ++i) yp[i * inner] = (xp[i * inner] - mx) - ls;
    } else {
      for (int64_t i = 0; i < D; ++i) {
        float v = expf(xp[i * inner] - mx);
        yp[i * inner] = v;
        s += v;
      }
      const float inv = static_cast<float>(1.0 / s);
      for (int64_t i = 0; i < D; ++i) yp[i * inner] *= inv;
    }
  }
}

template <bool kLog>
__global__ void softmax_strided_backward(const float* __restrict__ y, const float* __restrict__ g,
                                         float* __restrict__ gx, int64_t lines, int64_t D, int64_t inner) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < lines * inner;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = (t / inner) * D * inner + t % inner;
    if (kLog) {
      double sum = 0;
      for (int64_t i = 0; i < D; ++i) sum += g[o + i * inner];
      const float sg = static_cast<float>(sum);
      for (int64_t i = 0; i < D; ++i) gx[o + i * inner] = g[o + i * inner] - expf(y[o + i * inner]) * sg;
    } else {
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(y[o + i * inner]) * g[o + i * inner];
      const float d = static_cast<float>(dot);
      for (int64_t i = 0; i < D; ++i) gx[o + i * inner] = y[o + i * inner] * (g[o + i * inner] - d);
    }
  }
}

unsigned warp_blocks(int64_t lines) {
  int64_t b = (lines + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

class CudaSoftmax final : public CudaOp {
 public:
  explicit CudaSoftmax(const SoftmaxAttrs& a) : a_(a) {}

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, x.shape());
    const int64_t lines = x.shape()[0] * a_.outer_;
    if (x.numel() == 0) return;
    if (a_.log_)
      launch_forward<true>(ctx, x, io.out, lines);
    else
      launch_forward<false>(ctx, x, io.out, lines);
  }

  template <bool kLog>
  void launch_forward(const RunCtx& ctx, const Tensor& x, Tensor* y, int64_t lines) {
    cudaStream_t s = ctx.cuda->stream;
    if (a_.inner_ == 1)
      softmax_rows<kLog><<<warp_blocks(lines), 32 * kWarpsPerBlock, 0, s>>>(x.f32(), y->f32(), lines, a_.D_);
    else
      softmax_strided<kLog><<<cuda_blocks(lines * a_.inner_), 256, 0, s>>>(x.f32(), y->f32(), lines, a_.D_,
                                                                             a_.inner_);
    DP_CUDA_LAUNCHED();
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    if (!io.gin[0]) return;
    const Tensor& y = *io.out;
    io.gin[0]->resize(DP_F32, y.shape());
    const int64_t lines = y.shape()[0] * a_.outer_;
    if (y.numel() == 0) return;
    if (a_.log_)
      launch_backward<true>(ctx, y, *io.gout, io.gin[0], lines);
    else
      launch_backward<false>(ctx, y, *io.gout, io.gin[0], lines);
  }

  template <bool kLog>
  void launch_backward(const RunCtx& ctx, const Tensor& y, const Tensor& g, Tensor* gx, int64_t lines) {
    cudaStream_t s = ctx.cuda->stream;
    if (a_.inner_ == 1)
      softmax_rows_backward<kLog><<<warp_blocks(lines), 32 * kWarpsPerBlock, 0, s>>>(y.f32(), g.f32(), gx->f32(),
                                                                                      lines, a_.D_);
    else
      softmax_strided_backward<kLog><<<cuda_blocks(lines * a_.inner_), 256, 0, s>>>(y.f32(), g.f32(), gx->f32(),
                                                                                     lines, a_.D_, a_.inner_);
    DP_CUDA_LAUNCHED();
  }

 private:
  const SoftmaxAttrs& a_;  // the model's layer, which outlives its replicas' ops
};

}  // namespace

std::unique_ptr<CudaOp> make_cuda_softmax(const Layer& layer) {
  const auto* a = dynamic_cast<const SoftmaxAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaSoftmax>(*a);
}

}  // namespace dp
