// MaxPool2d. The forward saves, per output, the flat index (within its input
// plane) of the maximum; the backward scatters the gradient there. Ties keep
// the first maximum, as PyTorch does.
#include <limits>

#include "layers/builtin.h"
#include "layers/util.h"

namespace dp {

namespace {
class MaxPool2d final : public Layer {
 public:
  int64_t kh_, kw_, sh_, sw_, ph_, pw_, dh_, dw_;
  bool ceil_ = false;
  int64_t C_ = 0, H_ = 0, W_ = 0, Ho_ = 0, Wo_ = 0;

  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    expect_rank("max_pool2d", s, 3, "[C, H, W]");
    C_ = s[0], H_ = s[1], W_ = s[2];
    Ho_ = window_out(H_, kh_, sh_, ph_, dh_, ceil_);
    Wo_ = window_out(W_, kw_, sw_, pw_, dw_, ceil_);
    if (Ho_ <= 0 || Wo_ <= 0)
      fail(DP_ERR_SHAPE, "max_pool2d input " + s.str() + " is too small for kernel " + pair_str(kh_, kw_) +
                             " with padding " + pair_str(ph_, pw_) + " and dilation " + pair_str(dh_, dw_) +
                             ": output would be empty");
    return Shape{C_, Ho_, Wo_};
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], planes = n * C_;
    io.out->resize(DP_F32, Shape{n, C_, Ho_, Wo_});
    Tensor& arg = io.tmp(0);
    arg.resize(DP_I64, Shape{n, C_, Ho_, Wo_});
    const float* xs = x.f32();
    float* ys = io.out->f32();
    int64_t* am = arg.i64();
    parallel_for(ctx.pool, planes, 1 + kElemGrain / (H_ * W_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const float* xp = xs + pl * H_ * W_;
        float* yp = ys + pl * Ho_ * Wo_;
        int64_t* ap = am + pl * Ho_ * Wo_;
        for (int64_t oh = 0; oh < Ho_; ++oh)
          for (int64_t ow = 0; ow < Wo_; ++ow) {
            float best = -std::numeric_limits<float>::infinity();
            int64_t bi = -1;
            for (int64_t i = 0; i < kh_; ++i) {
              int64_t ih = oh * sh_ - ph_ + i * dh_;
              if (ih < 0 || ih >= H_) continue;
              for (int64_t j = 0; j < kw_; ++j) {
                int64_t iw = ow * sw_ - pw_ + j * dw_;
                if (iw < 0 || iw >= W_) continue;
                float v = xp[ih * W_ + iw];
                if (bi < 0 || v > best || v != v) {
                  best = v, bi = ih * W_ + iw;
                  if (v != v) goto done;
                }
              }
            }
          done:
            yp[oh * Wo_ + ow] = best;
            ap[oh * Wo_ + ow] = bi;
          }
      }
    });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    if (!io.gin[0]) return;
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], planes = n * C_;
    io.gin[0]->resize(DP_F32, x.shape());
    float* gx = io.gin[0]->f32();
    const float* g = io.gout->f32();
    const int64_t* am = io.tmp(0).i64();
    parallel_for(ctx.pool, planes, 1 + kElemGrain / (H_ * W_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        float* gp = gx + pl * H_ * W_;
        for (int64_t j = 0; j < H_ * W_; ++j) gp[j] = 0.f;
        const float* go = g + pl * Ho_ * Wo_;
        const int64_t* ap = am + pl * Ho_ * Wo_;
        for (int64_t j = 0; j < Ho_ * Wo_; ++j)
          if (ap[j] >= 0) gp[ap[j]] += go[j];
      }
    });
  }
};
}  // namespace

std::unique_ptr<Layer> make_max_pool2d(Args& a) {
  auto l = std::make_unique<MaxPool2d>();
  auto k = a.required_pair("kernel_size", 1);
  auto s = a.pair("stride", k, 1);
  auto p = a.pair("padding", {0, 0}, 0);
  auto d = a.pair("dilation", {1, 1}, 1);
  l->ceil_ = a.boolean("ceil_mode", false);
  if (p[0] > k[0] / 2 || p[1] > k[1] / 2)
    fail(DP_ERR_MODEL, a.path_of("padding") + ": padding " + pair_str(p[0], p[1]) +
                           " must be at most half of kernel_size " + pair_str(k[0], k[1]));
  l->kh_ = k[0], l->kw_ = k[1], l->sh_ = s[0], l->sw_ = s[1];
  l->ph_ = p[0], l->pw_ = p[1], l->dh_ = d[0], l->dw_ = d[1];
  return l;
}

}  // namespace dp
