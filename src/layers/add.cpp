// Element-wise sum of two or more inputs of equal shape.
#include <cstring>

#include "layers/builtin.h"
#include "layers/util.h"

namespace dp {

namespace {
class Add final : public Layer {
 public:
  std::pair<int, int> arity() const override { return {2, -1}; }

  Shape infer(const std::vector<Shape>& in) override {
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i] != in[0])
        fail(DP_ERR_SHAPE, "inputs have shapes " + shapes_str(in) + "; add needs equal shapes");
    return in[0];
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x0 = *io.in[0];
    io.out->resize(DP_F32, x0.shape());
    float* y = io.out->f32();
    const size_t m = io.in.size();
    parallel_for(ctx.pool, x0.numel(), kElemGrain, [&](int64_t b, int64_t e) {
      const float* a = io.in[0]->f32();
      for (int64_t i = b; i < e; ++i) y[i] = a[i];
      for (size_t k = 1; k < m; ++k) {
        const float* s = io.in[k]->f32();
        for (int64_t i = b; i < e; ++i) y[i] += s[i];
      }
    });
  }

  void backward(const RunCtx&, LayerIO& io) const override {
    for (Tensor* g : io.gin) {
      if (!g) continue;
      g->resize(DP_F32, io.gout->shape());
      std::memcpy(g->f32(), io.gout->f32(), io.gout->bytes());
    }
  }
};
}  // namespace

std::unique_ptr<Layer> make_add(Args&) { return std::make_unique<Add>(); }

}  // namespace dp
