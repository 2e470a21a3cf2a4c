// MaxPool2d. The forward saves, per output, the flat index (within its input
// plane, an int32) of the maximum; the backward scatters the gradient there. Ties keep
// the first maximum and a NaN wins (the last one), as PyTorch does.
#include <algorithm>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

#include "layers/builtin.h"
#include "layers/pool2d.h"
#include "layers/util.h"

namespace dp {

namespace {
class MaxPool2d final : public Layer, public MaxPool2dAttrs {
 public:
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
    if (W_ > 0 && H_ > std::numeric_limits<int32_t>::max() / W_)
      fail(DP_ERR_SHAPE, "max_pool2d input " + s.str() + " has planes of more than 2^31 - 1 elements (the index of "
                         "each maximum is an int32)");
    col_lo_.clear(), col_hi_.clear();
    for (int64_t j = 0; j < kw_; ++j) {  // the outputs ow whose column ow * sw + off lies in [0, W)
      const int64_t off = j * dw_ - pw_;
      col_lo_.push_back(std::min(Wo_, off < 0 ? (-off + sw_ - 1) / sw_ : 0));
      col_hi_.push_back(std::min(Wo_, W_ - off <= 0 ? 0 : (W_ - off + sw_ - 1) / sw_));
    }
    inside_ = ph_ == 0 && pw_ == 0 && (Ho_ - 1) * sh_ + (kh_ - 1) * dh_ < H_ && (Wo_ - 1) * sw_ + (kw_ - 1) * dw_ < W_;
    return Shape{C_, Ho_, Wo_};
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], planes = n * C_;
    io.out->resize(DP_F32, Shape{n, C_, Ho_, Wo_});
    Tensor& arg = io.tmp(0);
    arg.resize(DP_F32, Shape{n, C_, Ho_, Wo_});  // int32 flat indices in 4-byte elements (half the traffic of int64)
    const float* xs = x.f32();
    float* ys = io.out->f32();
    int32_t* am = static_cast<int32_t*>(arg.data());
    parallel_for(ctx.pool, planes, 1 + kElemGrain / (H_ * W_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const float* xp = xs + pl * H_ * W_;
        float* yp = ys + pl * Ho_ * Wo_;
        int32_t* ap = am + pl * Ho_ * Wo_;
        if (inside_)
          sw_ == 2 ? pool_plane_inside<2>(xp, yp, ap) : pool_plane_inside<0>(xp, yp, ap);
        else
          sw_ == 2 ? pool_plane<2>(xp, yp, ap) : pool_plane<0>(xp, yp, ap);
      }
    });
  }

  // Every window lies inside the plane (no padding, no partial window from
  // ceil_mode: the usual 2x2 pooling): pool_plane's order (row by row, tap by
  // tap across the row: keep_max's rule) with no bounds to check, no -inf
  // start and no first-tap test: 2x2 pooling of 28x28 planes 1.96x what it
  // was, the Fashion-MNIST CNN's step 1.09x; folded into pool_plane, 2x2
  // pooling lost 15% (bench/RESULTS.md). Both take the stride as kSw, 2 (the
  // usual one, which the compiler then knows) or 0 (sw_).
  template <int64_t kSw>
  void pool_plane_inside(const float* __restrict xp, float* __restrict yp, int32_t* __restrict ap) const {
    const int64_t W = W_, Ho = Ho_, Wo = Wo_, kh = kh_, kw = kw_, sh = sh_, sw = kSw ? kSw : sw_, dh = dh_,
                  dw = dw_;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      // The row's maxima and their indices are kept in the output itself
      // (a copy from a scratch row costs more than the row's work at Wo 14).
      float* __restrict best = yp + oh * Wo;
      int32_t* __restrict bi = ap + oh * Wo;
      const int32_t top = static_cast<int32_t>(oh * sh * W);  // the row's first tap
      const float* x = xp + top;
      for (int64_t o = 0; o < Wo; ++o) best[o] = x[o * sw], bi[o] = top + static_cast<int32_t>(o * sw);
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = i == 0 ? 1 : 0; j < kw; ++j) {
          const int64_t off = i * dh * W + j * dw;
          const float* xt = x + off;
          const int32_t at = top + static_cast<int32_t>(off);
          for (int64_t o = 0; o < Wo; ++o) keep_max(best[o], bi[o], xt[o * sw], at + static_cast<int32_t>(o * sw), false);
        }
    }
  }

  // One output row at a time, tap by tap across the whole row: the outputs of
  // a row are independent, so the loop over them vectorises, and the running
  // maximum is kept with selects (keep_max), in the output row itself. Taps
  // are visited in the same order for every output, in PyTorch's order (row
  // by row), so keep_max resolves ties and NaNs as PyTorch. Column tap j
  // reaches outputs [col_lo_[j], col_hi_[j]) of every row (infer). Dimensions
  // are copied to locals: stores through yp/ap could otherwise alias the
  // members.
  template <int64_t kSw>
  void pool_plane(const float* __restrict xp, float* __restrict yp, int32_t* __restrict ap) const {
    const int64_t H = H_, W = W_, Ho = Ho_, Wo = Wo_, kh = kh_, kw = kw_, sh = sh_, sw = kSw ? kSw : sw_, ph = ph_,
                  pw = pw_, dh = dh_, dw = dw_;
    const int64_t* col_lo = col_lo_.data();
    const int64_t* col_hi = col_hi_.data();
    for (int64_t oh = 0; oh < Ho; ++oh) {
      float* __restrict best = yp + oh * Wo;
      int32_t* __restrict bi = ap + oh * Wo;
      for (int64_t o = 0; o < Wo; ++o) best[o] = -std::numeric_limits<float>::infinity(), bi[o] = -1;
      const int64_t h0 = oh * sh - ph;
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t ih = h0 + i * dh;
        if (ih < 0 || ih >= H) continue;
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t off = j * dw - pw;  // input column of output ow is ow * sw + off
          const float* x = xp + ih * W + off;
          const int32_t base = static_cast<int32_t>(ih * W + off);
          for (int64_t o = col_lo[j]; o < col_hi[j]; ++o)  // x[o * sw] where it wins (the first tap in, always)
            keep_max(best[o], bi[o], x[o * sw], base + static_cast<int32_t>(o * sw), bi[o] < 0);
        }
      }
    }
  }

  // The running maximum of one output (best, at flat index bi) takes v (at
  // index at) where v is greater or NaN, or where first: as PyTorch's CPU
  // kernel ("val > maxval || isnan(val)"), ties keep the first maximum and
  // the last NaN wins. Selected with masks: on real data the comparison is a
  // coin toss, and a compiler branches on a float select outside a
  // vectorised loop.
  static inline void keep_max(float& best, int32_t& bi, float v, int32_t at, bool first) {
    const float b = best;
    const int32_t take = -static_cast<int32_t>(first | (v > b) | (v != v));
    int32_t vb, bb;
    std::memcpy(&vb, &v, 4);
    std::memcpy(&bb, &b, 4);
    const int32_t r = (vb & take) | (bb & ~take);
    std::memcpy(&best, &r, 4);
    bi = (at & take) | (bi & ~take);
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    if (!io.gin[0]) return;
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], planes = n * C_;
    io.gin[0]->resize(DP_F32, x.shape());
    float* gx = io.gin[0]->f32();
    const float* g = io.gout->f32();
    const int32_t* am = static_cast<const int32_t*>(io.tmp(0).data());
    parallel_for(ctx.pool, planes, 1 + kElemGrain / (H_ * W_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        float* gp = gx + pl * H_ * W_;
        for (int64_t j = 0; j < H_ * W_; ++j) gp[j] = 0.f;
        const float* go = g + pl * Ho_ * Wo_;
        const int32_t* ap = am + pl * Ho_ * Wo_;
        for (int64_t j = 0; j < Ho_ * Wo_; ++j)
          if (ap[j] >= 0) gp[ap[j]] += go[j];
      }
    });
  }
 private:
  bool inside_ = false;  // every window inside the plane (infer)
  std::vector<int64_t> col_lo_, col_hi_;  // per column tap j: the outputs of a row it reaches (infer)
};
}  // namespace

std::unique_ptr<Layer> make_max_pool2d(Args& a) {
  auto l = std::make_unique<MaxPool2d>();
  auto k = required_window_arg(a, "kernel_size");
  auto s = window_arg(a, "stride", k, 1);
  auto p = window_arg(a, "padding", {0, 0}, 0);
  auto d = window_arg(a, "dilation", {1, 1}, 1);
  l->ceil_ = a.boolean("ceil_mode", false);
  if (p[0] > k[0] / 2 || p[1] > k[1] / 2)
    fail(DP_ERR_MODEL, a.path_of("padding") + ": padding " + pair_str(p[0], p[1]) +
                           " must be at most half of kernel_size " + pair_str(k[0], k[1]));
  l->kh_ = k[0], l->kw_ = k[1], l->sh_ = s[0], l->sw_ = s[1];
  l->ph_ = p[0], l->pw_ = p[1], l->dh_ = d[0], l->dw_ = d[1];
  return l;
}

}  // namespace dp
