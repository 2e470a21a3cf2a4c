// dropout on the GPU. Element i of this replica's rows is element
// (sample_offset + r) * inner + j = sample_offset * inner + i of the batch,
// and its mask is the CPU's, bit for bit (core/rng.h is DP_HD):
//   uniform01(hash_keys(seed, layer index, step), that counter) < p => dropped.
// The mask (0 or 1/(1-p)) is kept in scratch 0 for backward, as on the CPU.
#include "backends/cuda/ops/ops.h"
#include "core/rng.h"
#include "layers/dropout.h"

namespace dp {

namespace {

__global__ void dropout_forward(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ m,
                                int64_t n, uint64_t key, uint64_t first, float p, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float k = uniform01(key, first + static_cast<uint64_t>(i)) < p ? 0.f : scale;
    m[i] = k;
    y[i] = x[i] * k;
  }
}

__global__ void dropout_backward(const float* __restrict__ g, const float* __restrict__ m, float* __restrict__ gx,
                                 int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    gx[i] = g[i] * m[i];
}

class CudaDropout final : public CudaOp {
 public:
  CudaDropout(const Layer& layer, const DropoutAttrs& a) : layer_(layer), a_(a) {}

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, x.shape());
    const int64_t n = x.numel();
    if (n == 0) return;
    cudaStream_t s = ctx.cuda->stream;
    if (!active(ctx)) {
      DP_CUDA_CHECK(cudaMemcpyAsync(io.out->f32(), x.f32(), x.bytes(), cudaMemcpyDeviceToDevice, s));
      return;
    }
    Tensor& mask = io.tmp(0);
    mask.resize(DP_F32, x.shape());
    const uint64_t key =
        hash_keys(ctx.seed, static_cast<uint64_t>(layer_.index), static_cast<uint64_t>(ctx.step));
    const uint64_t first = static_cast<uint64_t>(ctx.sample_offset) * static_cast<uint64_t>(x.shape().inner());
    const float p = static_cast<float>(a_.p_), scale = static_cast<float>(1.0 / (1.0 - a_.p_));
    dropout_forward<<<cuda_blocks(n), 256, 0, s>>>(x.f32(), io.out->f32(), mask.f32(), n, key, first, p, scale);
    DP_CUDA_LAUNCHED();
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    if (!io.gin[0]) return;
    const Tensor& g = *io.gout;
    io.gin[0]->resize(DP_F32, g.shape());
    const int64_t n = g.numel();
    if (n == 0) return;
    cudaStream_t s = ctx.cuda->stream;
    if (!active(ctx)) {
      DP_CUDA_CHECK(cudaMemcpyAsync(io.gin[0]->f32(), g.f32(), g.bytes(), cudaMemcpyDeviceToDevice, s));
      return;
    }
    dropout_backward<<<cuda_blocks(n), 256, 0, s>>>(g.f32(), io.tmp(0).f32(), io.gin[0]->f32(), n);
    DP_CUDA_LAUNCHED();
  }

 private:
  bool active(const RunCtx& ctx) const { return ctx.training && a_.p_ > 0; }

  const Layer& layer_;      // for its index; the model's layer outlives its replicas' ops
  const DropoutAttrs& a_;
};

}  // namespace

std::unique_ptr<CudaOp> make_cuda_dropout(const Layer& layer) {
  const auto* a = dynamic_cast<const DropoutAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaDropout>(layer, *a);
}

}  // namespace dp
