// BatchNorm over dim 0 of the per-sample input ([C], [C, L] or [C, H, W]),
// statistics over (N, spatial) of this replica's rows (like nn.DataParallel,
// not SyncBatchNorm).
//
// Scratch 0 holds, per channel, the mean and 1/sqrt(var + eps) the forward
// used, plus a flag saying whether they were batch statistics, so the backward
// differentiates exactly what the forward computed.
//
// Statistics (training with track_running_stats): stats[0, C) = batch mean,
// stats[C, 2C) = unbiased batch variance. With a single value per channel
// (count * spatial == 1) the unbiased variance is undefined: that replica's
// stats are skipped for running_var (still used for running_mean).
#include <algorithm>
#include <cmath>

#include "layers/batch_norm.h"
#include "layers/builtin.h"
#include "layers/util.h"

namespace dp {

namespace {

// Per-plane sums in float with eight independent partial sums, so the loop
// vectorises (one double accumulator per element was a serial chain of
// latency-bound adds); the order is fixed, so results stay deterministic.
// Planes are then summed in double.
constexpr int kLanes = 8;

double plane_sum(const float* __restrict p, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += p[j + k];
  double s = 0;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  for (; j < n; ++j) s += p[j];
  return s;
}

double plane_sq_dev(const float* __restrict p, int64_t n, float mu) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float d = p[j + k] - mu;
      acc[k] += d * d;
    }
  double s = 0;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  for (; j < n; ++j) s += double(p[j] - mu) * double(p[j] - mu);
  return s;
}

// sum g and sum g * (x - m) * is over one plane.
void plane_g_sums(const float* __restrict g, const float* __restrict x, int64_t n, float m, float is, double* sg,
                  double* sgx) {
  float a[kLanes] = {}, b[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      a[k] += g[j + k];
      b[k] += g[j + k] * ((x[j + k] - m) * is);
    }
  for (int k = 0; k < kLanes; ++k) *sg += a[k], *sgx += b[k];
  for (; j < n; ++j) *sg += g[j], *sgx += double(g[j]) * ((x[j] - m) * is);
}

void plane_affine(const float* __restrict x, float* __restrict y, int64_t n, float a, float b) {
  for (int64_t j = 0; j < n; ++j) y[j] = a * x[j] + b;
}

void plane_grad(const float* __restrict g, const float* __restrict x, float* __restrict gx, int64_t n, float a,
                float mg, float m, float is, float mgx) {
  for (int64_t j = 0; j < n; ++j) gx[j] = a * (g[j] - mg - (x[j] - m) * is * mgx);
}

// One value per channel (input [N, C], as after a linear layer): the planes
// above would be single elements strided C apart, a call and a cache line
// each. Rows are walked instead, a block of channels at a time, with each
// channel's arithmetic exactly that of the planes above (the same adds in
// the same order), so results are bitwise the same either way.
constexpr int64_t kBlock = 64;  // channels per block: their sums on the stack

class BatchNorm final : public Layer, public BatchNormAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    if (kind_ == "batch_norm1d") {
      if (s.ndim != 1 && s.ndim != 2)
        fail(DP_ERR_SHAPE, "batch_norm1d expects input of shape [C] or [C, L], got " + s.str());
    } else if (kind_ == "batch_norm2d") {
      expect_rank("batch_norm2d", s, 3, "[C, H, W]");
    } else if (s.ndim < 1 || s.ndim > 3) {
      fail(DP_ERR_SHAPE, "batch_norm expects input of shape [C], [C, L] or [C, H, W], got " + s.str());
    }
    if (C_arg_ > 0 && s[0] != C_arg_)
      fail(DP_ERR_SHAPE, kind_ + " expects " + std::to_string(C_arg_) + " channels (num_features) in dim 0, got input " +
                             s.str());
    C_ = s[0];
    S_ = s.inner();
    return s;
  }

  std::vector<TensorSpec> params() const override {
    if (!affine_) return {};
    return {{"weight", Shape{C_}, {Init::kOnes, 0}}, {"bias", Shape{C_}, {Init::kZeros, 0}}};
  }
  std::vector<TensorSpec> buffers() const override {
    if (!track_) return {};
    return {{"running_mean", Shape{C_}, {Init::kZeros, 0}}, {"running_var", Shape{C_}, {Init::kOnes, 0}}};
  }
  int64_t stats_size() const override { return track_ ? 2 * C_ : 0; }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], M = n * S_;
    io.out->resize(DP_F32, x.shape());
    Tensor& st = io.tmp(0);
    st.resize(DP_F32, Shape{2 * C_ + 1});
    float* mean = st.f32();
    float* invstd = mean + C_;
    const bool batch_stats = ctx.training || !track_;
    mean[2 * C_] = batch_stats ? 1.f : 0.f;
    const float* xs = x.f32();
    float* ys = io.out->f32();
    const float* gamma = affine_ ? io.params : nullptr;
    const float* beta = affine_ ? io.params + C_ : nullptr;
    float* stats = (ctx.training && track_) ? io.stats : nullptr;
    if (S_ == 1) {
      parallel_for(ctx.pool, C_, kBlock, [&](int64_t cb, int64_t ce) {
        for (int64_t c0 = cb; c0 < ce; c0 += kBlock)
          forward_rows(xs, ys, n, c0, std::min(ce, c0 + kBlock), batch_stats, gamma, beta, io.buffers, stats, mean);
      });
      return;
    }
    parallel_for(ctx.pool, C_, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        double mu, var;
        if (batch_stats) {
          double s = 0;
          for (int64_t i = 0; i < n; ++i) s += plane_sum(xs + (i * C_ + c) * S_, S_);
          mu = M > 0 ? s / static_cast<double>(M) : 0.0;
          double q = 0;
          for (int64_t i = 0; i < n; ++i) q += plane_sq_dev(xs + (i * C_ + c) * S_, S_, static_cast<float>(mu));
          var = M > 0 ? q / static_cast<double>(M) : 0.0;
          if (stats) {
            stats[c] = static_cast<float>(mu);
            stats[C_ + c] = static_cast<float>(M > 1 ? q / static_cast<double>(M - 1) : var);
          }
        } else {
          mu = io.buffers[c];
          var = io.buffers[C_ + c];
        }
        float m = static_cast<float>(mu);
        float is = static_cast<float>(1.0 / std::sqrt(var + eps_));
        mean[c] = m, invstd[c] = is;
        float a = gamma ? gamma[c] * is : is;
        float b = (beta ? beta[c] : 0.f) - a * m;
        for (int64_t i = 0; i < n; ++i) plane_affine(xs + (i * C_ + c) * S_, ys + (i * C_ + c) * S_, S_, a, b);
      }
    });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], M = n * S_;
    const float* mean = io.tmp(0).f32();
    const float* invstd = mean + C_;
    const bool batch_stats = mean[2 * C_] != 0.f;
    const float* xs = x.f32();
    const float* gs = io.gout->f32();
    float* gx = nullptr;
    if (io.gin[0]) {
      io.gin[0]->resize(DP_F32, x.shape());
      gx = io.gin[0]->f32();
    }
    const float* gamma = affine_ ? io.params : nullptr;
    float* dgamma = affine_ ? io.grads : nullptr;
    float* dbeta = affine_ ? io.grads + C_ : nullptr;
    if (S_ == 1) {
      parallel_for(ctx.pool, C_, kBlock, [&](int64_t cb, int64_t ce) {
        for (int64_t c0 = cb; c0 < ce; c0 += kBlock)
          backward_rows(gs, xs, gx, n, c0, std::min(ce, c0 + kBlock), batch_stats, gamma, dgamma, dbeta, mean);
      });
      return;
    }
    parallel_for(ctx.pool, C_, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        const float m = mean[c], is = invstd[c];
        double sg = 0, sgx = 0;  // sum g, sum g * xhat
        for (int64_t i = 0; i < n; ++i) plane_g_sums(gs + (i * C_ + c) * S_, xs + (i * C_ + c) * S_, S_, m, is, &sg, &sgx);
        if (dgamma) {
          dgamma[c] += static_cast<float>(sgx);
          dbeta[c] += static_cast<float>(sg);
        }
        if (!gx) continue;
        const float gm = gamma ? gamma[c] : 1.f;
        const float a = gm * is;
        float mg = 0.f, mgx = 0.f;
        if (batch_stats && M > 0) {
          mg = static_cast<float>(sg / static_cast<double>(M));
          mgx = static_cast<float>(sgx / static_cast<double>(M));
        }
        for (int64_t i = 0; i < n; ++i) {
          const int64_t o = (i * C_ + c) * S_;
          plane_grad(gs + o, xs + o, gx + o, S_, a, mg, m, is, mgx);
        }
      }
    });
  }

  // forward() for S_ == 1, channels [c0, c1) (at most kBlock).
  void forward_rows(const float* __restrict xs, float* __restrict ys, int64_t n, int64_t c0, int64_t c1,
                    bool batch_stats, const float* gamma, const float* beta, const float* buffers, float* stats,
                    float* mean) const {
    const int64_t w = c1 - c0, M = n;
    float* invstd = mean + C_;
    double s[kBlock] = {}, q[kBlock] = {};
    float m[kBlock], a[kBlock], b[kBlock];
    if (batch_stats) {
      for (int64_t i = 0; i < n; ++i) {
        const float* x = xs + i * C_ + c0;
        for (int64_t k = 0; k < w; ++k) s[k] += x[k];
      }
      for (int64_t k = 0; k < w; ++k) m[k] = static_cast<float>(M > 0 ? s[k] / static_cast<double>(M) : 0.0);
      for (int64_t i = 0; i < n; ++i) {
        const float* x = xs + i * C_ + c0;
        for (int64_t k = 0; k < w; ++k) {
          const float d = x[k] - m[k];
          q[k] += double(d) * double(d);
        }
      }
    }
    for (int64_t k = 0; k < w; ++k) {
      const int64_t c = c0 + k;
      double var;
      if (batch_stats) {
        var = M > 0 ? q[k] / static_cast<double>(M) : 0.0;
        if (stats) {
          stats[c] = m[k];
          stats[C_ + c] = static_cast<float>(M > 1 ? q[k] / static_cast<double>(M - 1) : var);
        }
      } else {
        m[k] = buffers[c];
        var = buffers[C_ + c];
      }
      const float is = static_cast<float>(1.0 / std::sqrt(var + eps_));
      mean[c] = m[k], invstd[c] = is;
      a[k] = gamma ? gamma[c] * is : is;
      b[k] = (beta ? beta[c] : 0.f) - a[k] * m[k];
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* x = xs + i * C_ + c0;
      float* y = ys + i * C_ + c0;
      for (int64_t k = 0; k < w; ++k) y[k] = a[k] * x[k] + b[k];
    }
  }

  // backward() for S_ == 1, channels [c0, c1) (at most kBlock).
  void backward_rows(const float* __restrict gs, const float* __restrict xs, float* __restrict gx, int64_t n,
                     int64_t c0, int64_t c1, bool batch_stats, const float* gamma, float* dgamma, float* dbeta,
                     const float* mean) const {
    const int64_t w = c1 - c0, M = n;
    const float* invstd = mean + C_;
    double sg[kBlock] = {}, sgx[kBlock] = {};
    const float* m = mean + c0;
    const float* is = invstd + c0;
    for (int64_t i = 0; i < n; ++i) {
      const float* g = gs + i * C_ + c0;
      const float* x = xs + i * C_ + c0;
      for (int64_t k = 0; k < w; ++k) {
        sg[k] += g[k];
        sgx[k] += double(g[k]) * ((x[k] - m[k]) * is[k]);
      }
    }
    if (dgamma)
      for (int64_t k = 0; k < w; ++k) {
        dgamma[c0 + k] += static_cast<float>(sgx[k]);
        dbeta[c0 + k] += static_cast<float>(sg[k]);
      }
    if (!gx) return;
    float a[kBlock], mg[kBlock] = {}, mgx[kBlock] = {};
    for (int64_t k = 0; k < w; ++k) {
      a[k] = (gamma ? gamma[c0 + k] : 1.f) * is[k];
      if (batch_stats && M > 0) {
        mg[k] = static_cast<float>(sg[k] / static_cast<double>(M));
        mgx[k] = static_cast<float>(sgx[k] / static_cast<double>(M));
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* g = gs + i * C_ + c0;
      const float* x = xs + i * C_ + c0;
      float* o = gx + i * C_ + c0;
      for (int64_t k = 0; k < w; ++k) o[k] = a[k] * (g[k] - mg[k] - (x[k] - m[k]) * is[k] * mgx[k]);
    }
  }

  void merge_stats(float* buffers, const float* const* stats, const int64_t* count, int replicas) const override {
    if (!track_) return;
    for (int64_t c = 0; c < C_; ++c) {
      double sm = 0, wm = 0, sv = 0, wv = 0;
      for (int r = 0; r < replicas; ++r) {
        if (count[r] <= 0) continue;
        double w = static_cast<double>(count[r]);
        sm += w * stats[r][c], wm += w;
        if (count[r] * S_ > 1) sv += w * stats[r][C_ + c], wv += w;
      }
      if (wm > 0) buffers[c] = static_cast<float>((1 - momentum_) * buffers[c] + momentum_ * (sm / wm));
      if (wv > 0) buffers[C_ + c] = static_cast<float>((1 - momentum_) * buffers[C_ + c] + momentum_ * (sv / wv));
    }
  }
};

std::unique_ptr<Layer> make(Args& a, const char* kind) {
  auto l = std::make_unique<BatchNorm>();
  l->kind_ = kind;
  l->C_arg_ = a.integer("num_features", 0, 1);
  l->eps_ = a.number("eps", 1e-5, 0.0, 1e30);
  l->momentum_ = a.number("momentum", 0.1, 0.0, 1.0);
  l->affine_ = a.boolean("affine", true);
  l->track_ = a.boolean("track_running_stats", true);
  return l;
}
}  // namespace

std::unique_ptr<Layer> make_batch_norm(Args& a) { return make(a, "batch_norm"); }
std::unique_ptr<Layer> make_batch_norm1d(Args& a) { return make(a, "batch_norm1d"); }
std::unique_ptr<Layer> make_batch_norm2d(Args& a) { return make(a, "batch_norm2d"); }

}  // namespace dp
