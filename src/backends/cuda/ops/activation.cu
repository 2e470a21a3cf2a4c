// relu, leaky_relu, sigmoid, tanh and gelu on the GPU: the CPU layer's own Op
// (layers/activations.h, DP_HD) applied by a grid-stride kernel, so both
// backends evaluate the same formula.
#include "backends/cuda/ops/ops.h"
#include "layers/activations.h"
#include "layers/elementwise.h"

namespace dp {

namespace {

template <class Op>
__global__ void act_forward(Op op, const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = op.f(x[i]);
}

template <class Op>
__global__ void act_backward(Op op, const float* __restrict__ x, const float* __restrict__ y,
                             const float* __restrict__ g, float* __restrict__ gx, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    gx[i] = g[i] * op.df(x[i], y[i]);
}

template <class Op>
class CudaActivation final : public CudaOp {
 public:
  explicit CudaActivation(const Op& op) : op_(op) {}

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, x.shape());
    const int64_t n = x.numel();
    if (n == 0) return;
    act_forward<<<cuda_blocks(n), 256, 0, ctx.cuda->stream>>>(op_, x.f32(), io.out->f32(), n);
    DP_CUDA_LAUNCHED();
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    if (!io.gin[0]) return;
    const Tensor& x = *io.in[0];
    io.gin[0]->resize(DP_F32, x.shape());
    const int64_t n = x.numel();
    if (n == 0) return;
    act_backward<<<cuda_blocks(n), 256, 0, ctx.cuda->stream>>>(op_, x.f32(), io.out->f32(), io.gout->f32(),
                                                                io.gin[0]->f32(), n);
    DP_CUDA_LAUNCHED();
  }

 private:
  Op op_;  // a copy: the kernels take it by value
};

template <class Op>
std::unique_ptr<CudaOp> make_if(const Layer& layer) {
  const auto* e = dynamic_cast<const Elementwise<Op>*>(&layer);
  if (!e) return nullptr;
  return std::make_unique<CudaActivation<Op>>(e->op);
}

}  // namespace

std::unique_ptr<CudaOp> make_cuda_activation(const Layer& layer) {
  if (auto op = make_if<ReluOp>(layer)) return op;
  if (auto op = make_if<LeakyReluOp>(layer)) return op;
  if (auto op = make_if<SigmoidOp>(layer)) return op;
  if (auto op = make_if<TanhOp>(layer)) return op;
  return make_if<GeluOp>(layer);
}

}  // namespace dp
