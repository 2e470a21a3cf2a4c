// An element-wise activation: Op supplies f(x) and, given x and y = f(x),
// dy/dx. Any input shape.
#pragma once
#include "layers/util.h"

namespace dp {

// The loops take __restrict pointers as parameters (a lambda's captures would
// lose it), so they vectorise: a blend, not a mispredicted branch per element.
template <class Op>
void apply_f(const Op& op, const float* __restrict x, float* __restrict y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) y[i] = op.f(x[i]);
}
template <class Op>
void apply_df(const Op& op, const float* __restrict x, const float* __restrict y, const float* __restrict g,
              float* __restrict gx, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) gx[i] = g[i] * op.df(x[i], y[i]);
}

template <class Op>
class Elementwise final : public Layer {
 public:
  Op op;

  Shape infer(const std::vector<Shape>& in) override { return in[0]; }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, x.shape());
    const float* xs = x.f32();
    float* ys = io.out->f32();
    parallel_for(ctx.pool, x.numel(), kElemGrain, [&](int64_t b, int64_t e) { apply_f(op, xs, ys, b, e); });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    if (!io.gin[0]) return;
    const Tensor& x = *io.in[0];
    io.gin[0]->resize(DP_F32, x.shape());
    const float* xs = x.f32();
    const float* ys = io.out->f32();
    const float* g = io.gout->f32();
    float* gx = io.gin[0]->f32();
    parallel_for(ctx.pool, x.numel(), kElemGrain, [&](int64_t b, int64_t e) { apply_df(op, xs, ys, g, gx, b, e); });
  }
};

}  // namespace dp
