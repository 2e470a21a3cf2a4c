// 2-D convolution (PyTorch's Conv2d) by im2col + gemm, col2im for the input
// gradient. With a pool and at least as many samples as workers, samples are
// split over the workers (one column buffer and one weight-gradient buffer per
// worker); otherwise samples run one after another and each gemm is split.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/blas.h"
#include "core/memory.h"
#include "layers/builtin.h"
#include "layers/conv2d.h"
#include "layers/util.h"

namespace dp {

namespace {
class Conv2d final : public Layer, public Conv2dAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    expect_rank("conv2d", s, 3, "[C, H, W]");
    if (cin_ > 0 && s[0] != cin_)
      fail(DP_ERR_SHAPE, "conv2d expects input of shape [" + std::to_string(cin_) + ", H, W] (in_channels), got " + s.str());
    cin_ = s[0];
    if (cin_ % groups_ != 0)
      fail(DP_ERR_SHAPE, "conv2d input has " + std::to_string(cin_) + " channels (input " + s.str() +
                             "), not divisible by groups = " + std::to_string(groups_));
    H_ = s[1], W_ = s[2];
    Ho_ = window_out(H_, kh_, sh_, ph_, dh_, false);
    Wo_ = window_out(W_, kw_, sw_, pw_, dw_, false);
    if (Ho_ <= 0 || Wo_ <= 0)
      fail(DP_ERR_SHAPE, "conv2d input " + s.str() + " is too small for kernel " + pair_str(kh_, kw_) + " with padding " +
                             pair_str(ph_, pw_) + " and dilation " + pair_str(dh_, dw_) + ": output would be empty");
    return Shape{cout_, Ho_, Wo_};
  }

  std::vector<TensorSpec> params() const override {
    int64_t fan_in = K();
    float bound = fan_in > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in))) : 0.f;
    std::vector<TensorSpec> p{{"weight", Shape{cout_, cin_ / groups_, kh_, kw_}, {Init::kUniform, bound}}};
    if (bias_) p.push_back({"bias", Shape{cout_}, {Init::kUniform, bound}});
    return p;
  }

  // Output columns [lo, hi) whose input column ow*sw + off is inside [0, W):
  // computed once per kernel column, so the copy loops below have no bounds
  // checks (they were a branch per element).
  void valid_cols(int64_t off, int64_t* lo, int64_t* hi) const {
    *lo = off < 0 ? std::min(Wo_, (-off + sw_ - 1) / sw_) : 0;
    *hi = W_ - off <= 0 ? 0 : std::min(Wo_, (W_ - off + sw_ - 1) / sw_);
    if (*hi < *lo) *hi = *lo;
  }

  void im2col(const float* x, float* col) const {
    const int64_t HoWo = Ho_ * Wo_;
    for (int64_t c = 0; c < cin_; ++c)
      for (int64_t ki = 0; ki < kh_; ++ki)
        for (int64_t kj = 0; kj < kw_; ++kj) {
          float* row = col + ((c * kh_ + ki) * kw_ + kj) * HoWo;
          const float* xc = x + c * H_ * W_;
          const int64_t off = kj * dw_ - pw_;
          int64_t lo, hi;
          valid_cols(off, &lo, &hi);
          for (int64_t oh = 0; oh < Ho_; ++oh) {
            const int64_t ih = oh * sh_ - ph_ + ki * dh_;
            float* r = row + oh * Wo_;
            if (ih < 0 || ih >= H_) {
              std::memset(r, 0, sizeof(float) * Wo_);
              continue;
            }
            const float* xr = xc + ih * W_ + off;
            for (int64_t ow = 0; ow < lo; ++ow) r[ow] = 0.f;
            if (sw_ == 1)
              std::memcpy(r + lo, xr + lo, sizeof(float) * (hi - lo));
            else
              for (int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow * sw_];
            for (int64_t ow = hi; ow < Wo_; ++ow) r[ow] = 0.f;
          }
        }
  }

  void col2im(const float* col, float* gx) const {
    const int64_t HoWo = Ho_ * Wo_;
    for (int64_t c = 0; c < cin_; ++c)
      for (int64_t ki = 0; ki < kh_; ++ki)
        for (int64_t kj = 0; kj < kw_; ++kj) {
          const float* row = col + ((c * kh_ + ki) * kw_ + kj) * HoWo;
          float* gc = gx + c * H_ * W_;
          const int64_t off = kj * dw_ - pw_;
          int64_t lo, hi;
          valid_cols(off, &lo, &hi);
          for (int64_t oh = 0; oh < Ho_; ++oh) {
            const int64_t ih = oh * sh_ - ph_ + ki * dh_;
            if (ih < 0 || ih >= H_) continue;
            add_row(row + oh * Wo_, gc + ih * W_ + off, lo, hi, sw_);
          }
        }
  }

  // dst[ow * stride] += src[ow] for ow in [lo, hi); __restrict parameters so
  // the unit-stride case vectorises.
  static void add_row(const float* __restrict src, float* __restrict dst, int64_t lo, int64_t hi, int64_t stride) {
    if (stride == 1)
      for (int64_t ow = lo; ow < hi; ++ow) dst[ow] += src[ow];
    else
      for (int64_t ow = lo; ow < hi; ++ow) dst[ow * stride] += src[ow];
  }

  void plan(const RunCtx& ctx, int64_t n, int64_t* parts, Workers** gpool) const {
    if (ctx.pool && ctx.pool->size() > 1 && n >= ctx.pool->size()) {
      *parts = ctx.pool->size();
      *gpool = nullptr;
    } else {
      *parts = 1;
      *gpool = ctx.pool;
    }
  }

  template <class F>
  static void run_parts(Workers* pool, int64_t parts, int64_t n, F&& f) {
    parallel_for(parts > 1 ? pool : nullptr, parts, 1, [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) f(p, n * p / parts, n * (p + 1) / parts);
    });
  }

  // Per worker thread: one sample's unfolded input (none for a pointwise
  // convolution), and in backward the weight gradients of a thread beyond
  // the first.
  int64_t scratch_floats() const override {
    const int64_t col = pointwise() ? 0 : checked_mul(col_rows(), Ho_ * Wo_, path + " unfolded input");
    return checked_add(col, wsize() + (bias_ ? cout_ : 0), path + " scratch");
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], HoWo = Ho_ * Wo_, k = K(), cog = cout_ / groups_;
    io.out->resize(DP_F32, Shape{n, cout_, Ho_, Wo_});
    int64_t parts;
    Workers* gpool;
    plan(ctx, n, &parts, &gpool);
    const bool pw = pointwise();
    float* colbuf = nullptr;
    if (!pw) {
      Tensor& col = io.tmp(0);
      col.resize(DP_F32, Shape{parts, col_rows() * HoWo});
      colbuf = col.f32();
    }
    const float* Wt = io.params;
    const float* b = bias_ ? Wt + wsize() : nullptr;
    const float* xs = x.f32();
    float* ys = io.out->f32();
    run_parts(ctx.pool, parts, n, [&](int64_t p, int64_t sb, int64_t se) {
      const SignalsHeld held;  // once for this part's products (core/blas.h)
      for (int64_t i = sb; i < se; ++i) {
        const float* xi = xs + i * cin_ * H_ * W_;
        float* yi = ys + i * cout_ * HoWo;
        const float* col = xi;
        if (!pw) {
          float* c = colbuf + p * col_rows() * HoWo;
          im2col(xi, c);
          col = c;
        }
        for (int64_t g = 0; g < groups_; ++g)
          gemm(gpool, false, false, cog, HoWo, k, 1.f, Wt + g * cog * k, k, col + g * k * HoWo, HoWo, 0.f,
               yi + g * cog * HoWo, HoWo);
        if (b)
          for (int64_t co = 0; co < cout_; ++co) {
            float* r = yi + co * HoWo;
            for (int64_t j = 0; j < HoWo; ++j) r[j] += b[co];
          }
      }
    });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], HoWo = Ho_ * Wo_, k = K(), cog = cout_ / groups_;
    const int64_t gsize = wsize() + (bias_ ? cout_ : 0);
    int64_t parts;
    Workers* gpool;
    plan(ctx, n, &parts, &gpool);
    const bool pw = pointwise();
    Tensor* gin = io.gin[0];
    if (gin) gin->resize(DP_F32, x.shape());
    float* colbuf = nullptr;
    if (!pw) {
      Tensor& col = io.tmp(0);
      col.resize(DP_F32, Shape{parts, col_rows() * HoWo});
      colbuf = col.f32();
    }
    float* gacc = nullptr;  // weight gradients of parts 1.. (part 0 adds into io.grads)
    if (parts > 1) {
      Tensor& acc = io.tmp(1);
      acc.resize(DP_F32, Shape{parts - 1, gsize});
      acc.zero();
      gacc = acc.f32();
    }
    const float* Wt = io.params;
    const float* xs = x.f32();
    const float* gs = io.gout->f32();
    run_parts(ctx.pool, parts, n, [&](int64_t p, int64_t sb, int64_t se) {
      const SignalsHeld held;  // once for this part's products (core/blas.h)
      float* dW = p == 0 ? io.grads : gacc + (p - 1) * gsize;
      float* c = pw ? nullptr : colbuf + p * col_rows() * HoWo;
      for (int64_t i = sb; i < se; ++i) {
        const float* xi = xs + i * cin_ * H_ * W_;
        const float* gi = gs + i * cout_ * HoWo;
        const float* col = xi;
        if (!pw) {
          im2col(xi, c);
          col = c;
        }
        for (int64_t g = 0; g < groups_; ++g)
          gemm(gpool, false, true, cog, k, HoWo, 1.f, gi + g * cog * HoWo, HoWo, col + g * k * HoWo, HoWo, 1.f,
               dW + g * cog * k, k);
        if (bias_) {
          float* db = dW + wsize();
          for (int64_t co = 0; co < cout_; ++co) db[co] += lane_sum(gi + co * HoWo, HoWo);
        }
        if (gin) {
          float* gx = gin->f32() + i * cin_ * H_ * W_;
          float* dcol = pw ? gx : c;  // the columns are no longer needed
          for (int64_t g = 0; g < groups_; ++g)
            gemm(gpool, true, false, k, HoWo, cog, 1.f, Wt + g * cog * k, k, gi + g * cog * HoWo, HoWo, 0.f,
                 dcol + g * k * HoWo, HoWo);
          if (!pw) {
            std::memset(gx, 0, sizeof(float) * cin_ * H_ * W_);
            col2im(dcol, gx);
          }
        }
      }
    });
    for (int64_t p = 1; p < parts; ++p) {
      const float* src = gacc + (p - 1) * gsize;
      for (int64_t j = 0; j < gsize; ++j) io.grads[j] += src[j];
    }
  }
};
}  // namespace

std::unique_ptr<Layer> make_conv2d(Args& a) {
  auto l = std::make_unique<Conv2d>();
  l->cin_ = a.integer("in_channels", 0, 1);
  l->cout_ = a.required_integer("out_channels", 1);
  auto k = required_window_arg(a, "kernel_size");
  auto s = window_arg(a, "stride", {1, 1}, 1);
  auto p = window_arg(a, "padding", {0, 0}, 0);
  auto d = window_arg(a, "dilation", {1, 1}, 1);
  l->groups_ = a.integer("groups", 1, 1);
  l->bias_ = a.boolean("bias", true);
  l->kh_ = k[0], l->kw_ = k[1], l->sh_ = s[0], l->sw_ = s[1];
  l->ph_ = p[0], l->pw_ = p[1], l->dh_ = d[0], l->dw_ = d[1];
  if (l->cout_ % l->groups_ != 0)
    fail(DP_ERR_MODEL, a.path_of("groups") + ": out_channels = " + std::to_string(l->cout_) +
                           " is not divisible by groups = " + std::to_string(l->groups_));
  if (l->cin_ > 0 && l->cin_ % l->groups_ != 0)
    fail(DP_ERR_MODEL, a.path_of("groups") + ": in_channels = " + std::to_string(l->cin_) +
                           " is not divisible by groups = " + std::to_string(l->groups_));
  return l;
}

}  // namespace dp
