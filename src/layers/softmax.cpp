// Softmax and LogSoftmax along `dim` (torch's dim over the batched tensor;
// not the batch). Per line of D values, m their maximum, s = sum exp(x - m):
//   softmax:     y = exp(x - m) / s,    dx = y (g - sum_i y_i g_i)
//   log_softmax: y = (x - m) - log(s),  dx = g - exp(y) sum_i g_i
// with the sums in double, in a fixed order.
#include <cmath>

#include "layers/builtin.h"
#include "layers/softmax.h"
#include "layers/util.h"

namespace dp {

namespace {
class Softmax final : public Layer, public SoftmaxAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    const int rank = s.ndim + 1;
    int d = resolve_dim(dim_, rank);
    if (d < 1 || d >= rank)
      fail(DP_ERR_SHAPE, std::string(log_ ? "log_softmax" : "softmax") + " dim " + std::to_string(dim_) + " does not fit input of shape [N] + " + s.str() +
                             (d == 0 ? " (dim 0 is the batch)" : ""));
    outer_ = 1, inner_ = 1;
    for (int i = 1; i < d; ++i) outer_ *= s[i - 1];
    D_ = s[d - 1];
    for (int i = d + 1; i < rank; ++i) inner_ *= s[i - 1];
    return s;
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, x.shape());
    const int64_t lines = x.shape()[0] * outer_;
    const float* xs = x.f32();
    float* ys = io.out->f32();
    parallel_for(ctx.pool, lines, 1 + kElemGrain / (D_ * inner_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t l = b; l < e; ++l)
        for (int64_t k = 0; k < inner_; ++k) {
          const float* xp = xs + l * D_ * inner_ + k;
          float* yp = ys + l * D_ * inner_ + k;
          float mx = -INFINITY;
          for (int64_t i = 0; i < D_; ++i) mx = std::max(mx, xp[i * inner_]);
          double s = 0;
          if (log_) {
            for (int64_t i = 0; i < D_; ++i) s += std::exp(xp[i * inner_] - mx);
            const float ls = static_cast<float>(std::log(s));
            for (int64_t i = 0; i < D_; ++i) yp[i * inner_] = (xp[i * inner_] - mx) - ls;
            continue;
          }
          for (int64_t i = 0; i < D_; ++i) {
            float v = std::exp(xp[i * inner_] - mx);
            yp[i * inner_] = v;
            s += v;
          }
          float inv = static_cast<float>(1.0 / s);
          for (int64_t i = 0; i < D_; ++i) yp[i * inner_] *= inv;
        }
    });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    if (!io.gin[0]) return;
    const Tensor& y = *io.out;
    io.gin[0]->resize(DP_F32, y.shape());
    const int64_t lines = y.shape()[0] * outer_;
    const float* ys = y.f32();
    const float* gs = io.gout->f32();
    float* gx = io.gin[0]->f32();
    parallel_for(ctx.pool, lines, 1 + kElemGrain / (D_ * inner_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t l = b; l < e; ++l)
        for (int64_t k = 0; k < inner_; ++k) {
          const int64_t o = l * D_ * inner_ + k;
          if (log_) {
            double sum = 0;
            for (int64_t i = 0; i < D_; ++i) sum += gs[o + i * inner_];
            const float sg = static_cast<float>(sum);
            for (int64_t i = 0; i < D_; ++i) gx[o + i * inner_] = gs[o + i * inner_] - std::exp(ys[o + i * inner_]) * sg;
            continue;
          }
          double dot = 0;
          for (int64_t i = 0; i < D_; ++i) dot += static_cast<double>(ys[o + i * inner_]) * gs[o + i * inner_];
          float d = static_cast<float>(dot);
          for (int64_t i = 0; i < D_; ++i) gx[o + i * inner_] = ys[o + i * inner_] * (gs[o + i * inner_] - d);
        }
    });
  }
};

std::unique_ptr<Layer> make(Args& a, bool log) {
  auto l = std::make_unique<Softmax>();
  l->log_ = log;
  l->dim_ = a.integer("dim", -1, -static_cast<int64_t>(DP_MAX_DIMS) - 1);
  if (l->dim_ == 0) fail(DP_ERR_MODEL, a.path_of("dim") + ": expected a dim other than 0 (the batch), got 0");
  return l;
}
}  // namespace

std::unique_ptr<Layer> make_softmax(Args& a) { return make(a, false); }
std::unique_ptr<Layer> make_log_softmax(Args& a) { return make(a, true); }

}  // namespace dp
