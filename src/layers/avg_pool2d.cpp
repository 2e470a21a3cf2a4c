// AvgPool2d, with PyTorch's divisor rules: with count_include_pad the window
// is clipped to the padded input (not to the ceil_mode overhang), otherwise to
// the input itself.
#include <algorithm>

#include "layers/builtin.h"
#include "layers/pool2d.h"
#include "layers/util.h"

namespace dp {

namespace {
class AvgPool2d final : public Layer, public AvgPool2dAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    expect_rank("avg_pool2d", s, 3, "[C, H, W]");
    C_ = s[0], H_ = s[1], W_ = s[2];
    Ho_ = window_out(H_, kh_, sh_, ph_, 1, ceil_);
    Wo_ = window_out(W_, kw_, sw_, pw_, 1, ceil_);
    if (Ho_ <= 0 || Wo_ <= 0)
      fail(DP_ERR_SHAPE, "avg_pool2d input " + s.str() + " is too small for kernel " + pair_str(kh_, kw_) +
                             " with padding " + pair_str(ph_, pw_) + ": output would be empty");
    return Shape{C_, Ho_, Wo_};
  }

  // The window of output (oh, ow) clipped to the input, and its divisor.
  void window(int64_t oh, int64_t ow, int64_t* h0, int64_t* h1, int64_t* w0, int64_t* w1, float* inv) const {
    int64_t hs = oh * sh_ - ph_, ws = ow * sw_ - pw_;
    int64_t he = std::min(hs + kh_, H_ + ph_), we = std::min(ws + kw_, W_ + pw_);
    int64_t pool = (he - hs) * (we - ws);
    hs = std::max<int64_t>(hs, 0), ws = std::max<int64_t>(ws, 0);
    he = std::min(he, H_), we = std::min(we, W_);
    int64_t div = include_pad_ ? pool : (he - hs) * (we - ws);
    *h0 = hs, *h1 = he, *w0 = ws, *w1 = we;
    *inv = div > 0 ? 1.f / static_cast<float>(div) : 0.f;
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], planes = n * C_;
    io.out->resize(DP_F32, Shape{n, C_, Ho_, Wo_});
    const float* xs = x.f32();
    float* ys = io.out->f32();
    parallel_for(ctx.pool, planes, 1 + kElemGrain / (H_ * W_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const float* xp = xs + pl * H_ * W_;
        float* yp = ys + pl * Ho_ * Wo_;
        for (int64_t oh = 0; oh < Ho_; ++oh)
          for (int64_t ow = 0; ow < Wo_; ++ow) {
            int64_t h0, h1, w0, w1;
            float inv;
            window(oh, ow, &h0, &h1, &w0, &w1, &inv);
            float s = 0.f;
            for (int64_t i = h0; i < h1; ++i)
              for (int64_t j = w0; j < w1; ++j) s += xp[i * W_ + j];
            yp[oh * Wo_ + ow] = s * inv;
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
    parallel_for(ctx.pool, planes, 1 + kElemGrain / (H_ * W_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        float* gp = gx + pl * H_ * W_;
        for (int64_t j = 0; j < H_ * W_; ++j) gp[j] = 0.f;
        const float* go = g + pl * Ho_ * Wo_;
        for (int64_t oh = 0; oh < Ho_; ++oh)
          for (int64_t ow = 0; ow < Wo_; ++ow) {
            int64_t h0, h1, w0, w1;
            float inv;
            window(oh, ow, &h0, &h1, &w0, &w1, &inv);
            float v = go[oh * Wo_ + ow] * inv;
            for (int64_t i = h0; i < h1; ++i)
              for (int64_t j = w0; j < w1; ++j) gp[i * W_ + j] += v;
          }
      }
    });
  }
};
}  // namespace

std::unique_ptr<Layer> make_avg_pool2d(Args& a) {
  auto l = std::make_unique<AvgPool2d>();
  auto k = required_window_arg(a, "kernel_size");
  auto s = window_arg(a, "stride", k, 1);
  auto p = window_arg(a, "padding", {0, 0}, 0);
  l->ceil_ = a.boolean("ceil_mode", false);
  l->include_pad_ = a.boolean("count_include_pad", true);
  if (p[0] > k[0] / 2 || p[1] > k[1] / 2)
    fail(DP_ERR_MODEL, a.path_of("padding") + ": padding " + pair_str(p[0], p[1]) +
                           " must be at most half of kernel_size " + pair_str(k[0], k[1]));
  l->kh_ = k[0], l->kw_ = k[1], l->sh_ = s[0], l->sw_ = s[1];
  l->ph_ = p[0], l->pw_ = p[1];
  return l;
}

}  // namespace dp
