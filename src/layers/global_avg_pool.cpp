// [C, H, W] -> [C]: the mean over each plane (AdaptiveAvgPool2d(1) + flatten).
#include "layers/builtin.h"
#include "layers/global_avg_pool.h"
#include "layers/util.h"

namespace dp {

namespace {
class GlobalAvgPool final : public Layer, public GlobalAvgPoolAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    expect_rank("global_avg_pool", in[0], 3, "[C, H, W]");
    C_ = in[0][0], HW_ = in[0][1] * in[0][2];
    if (HW_ == 0) fail(DP_ERR_SHAPE, "global_avg_pool needs a non-empty plane, got input " + in[0].str());
    return Shape{C_};
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0];
    io.out->resize(DP_F32, Shape{n, C_});
    const float* xs = x.f32();
    float* ys = io.out->f32();
    const float inv = 1.f / static_cast<float>(HW_);
    parallel_for(ctx.pool, n * C_, 1 + kElemGrain / HW_, [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        ys[pl] = lane_sum(xs + pl * HW_, HW_) * inv;
      }
    });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    if (!io.gin[0]) return;
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0];
    io.gin[0]->resize(DP_F32, x.shape());
    float* gx = io.gin[0]->f32();
    const float* g = io.gout->f32();
    const float inv = 1.f / static_cast<float>(HW_);
    parallel_for(ctx.pool, n * C_, 1 + kElemGrain / HW_, [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        float v = g[pl] * inv;
        float* p = gx + pl * HW_;
        for (int64_t j = 0; j < HW_; ++j) p[j] = v;
      }
    });
  }
};
}  // namespace

std::unique_ptr<Layer> make_global_avg_pool(Args&) { return std::make_unique<GlobalAvgPool>(); }

}  // namespace dp
