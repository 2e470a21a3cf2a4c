// Dropout. The mask of element j of global sample s at training step t is
//   uniform01(hash_keys(seed, layer index, t), s * inner + j) < p  => dropped,
// a pure function of those keys: the same whatever the batch split.
#include <cstring>

#include "core/rng.h"
#include "layers/builtin.h"
#include "layers/dropout.h"
#include "layers/util.h"

namespace dp {

namespace {
class Dropout final : public Layer, public DropoutAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override { return in[0]; }

  bool active(const RunCtx& ctx) const { return ctx.training && p_ > 0; }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, x.shape());
    if (!active(ctx)) {
      std::memcpy(io.out->f32(), x.f32(), x.bytes());
      return;
    }
    const int64_t n = x.shape()[0], inner = x.shape().inner();
    Tensor& mask = io.tmp(0);  // 0 or 1/(1-p) per element
    mask.resize(DP_F32, x.shape());
    const uint64_t key = hash_keys(ctx.seed, static_cast<uint64_t>(index), static_cast<uint64_t>(ctx.step));
    const float p = static_cast<float>(p_), scale = static_cast<float>(1.0 / (1.0 - p_));
    const float* xs = x.f32();
    float* ys = io.out->f32();
    float* m = mask.f32();
    parallel_for(ctx.pool, n, 1 + kElemGrain / (inner + 1), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const uint64_t base = static_cast<uint64_t>(ctx.sample_offset + r) * static_cast<uint64_t>(inner);
        for (int64_t j = 0; j < inner; ++j) {
          float k = uniform01(key, base + static_cast<uint64_t>(j)) < p ? 0.f : scale;
          m[r * inner + j] = k;
          ys[r * inner + j] = xs[r * inner + j] * k;
        }
      }
    });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    if (!io.gin[0]) return;
    const Tensor& g = *io.gout;
    io.gin[0]->resize(DP_F32, g.shape());
    if (!active(ctx)) {
      std::memcpy(io.gin[0]->f32(), g.f32(), g.bytes());
      return;
    }
    const float* m = io.tmp(0).f32();
    const float* gs = g.f32();
    float* gx = io.gin[0]->f32();
    parallel_for(ctx.pool, g.numel(), kElemGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) gx[i] = gs[i] * m[i];
    });
  }
};
}  // namespace

std::unique_ptr<Layer> make_dropout(Args& a) {
  auto l = std::make_unique<Dropout>();
  l->p_ = a.number("p", 0.5, 0.0, 1.0);
  if (l->p_ >= 1.0) fail(DP_ERR_MODEL, a.path_of("p") + ": expected a number in [0, 1), got 1");
  return l;
}

}  // namespace dp
