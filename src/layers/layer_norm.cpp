// LayerNorm, as torch.nn.LayerNorm: over the trailing dims `normalized_shape`
// of each sample (D values per row), with the row's mean m and biased
// variance v:
//   y = (x - m) * r * weight + bias,        r = 1 / sqrt(v + eps)
//   dx = r * (d - mean(d) - xhat * mean(d * xhat)),  xhat = (x - m) r, d = g * weight
//   dweight += sum over rows of g * xhat,   dbias += sum over rows of g
// Row statistics in double; the forward keeps m and r per row, in double
// (scratch 0), for the backward: rounded to float, a row far from 0 (mean
// 1e4, spread 1) would lose its gradients' digits to the mean's rounding.
// The parameter gradients sum rows in order, whatever the workers (each
// worker takes a block of columns over every row): a device's sum is the
// same on every run.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "layers/builtin.h"
#include "layers/layer_norm.h"
#include "layers/util.h"

namespace dp {

namespace {
class LayerNorm final : public Layer, public LayerNormAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    bool fits = s.ndim >= shape_.ndim;
    for (int i = 0; fits && i < shape_.ndim; ++i) fits = s[s.ndim - shape_.ndim + i] == shape_[i];
    if (!fits)
      fail(DP_ERR_SHAPE, "layer_norm normalized_shape " + shape_.str() + " is not the trailing dims of its input of shape [N] + " +
                             s.str() + " (torch.nn.LayerNorm normalizes over the last len(normalized_shape) dims)");
    D_ = shape_.numel();
    return s;
  }

  std::vector<TensorSpec> params() const override {
    std::vector<TensorSpec> p;
    if (affine_) p.push_back({"weight", shape_, {Init::kOnes}});
    if (affine_ && bias_) p.push_back({"bias", shape_, {Init::kZeros}});
    return p;
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, x.shape());
    const int64_t rows = x.numel() / D_;
    Tensor& st = io.tmp(0);
    st.resize(DP_I64, Shape{rows, 2});  // 8-byte elements, written and read as doubles only
    const float* xs = x.f32();
    float* ys = io.out->f32();
    double* mr = static_cast<double*>(st.data());
    const float* w = affine_ ? io.params : nullptr;
    const float* b = affine_ && bias_ ? io.params + D_ : nullptr;
    parallel_for(ctx.pool, rows, 1 + kElemGrain / D_, [&](int64_t rb, int64_t re) {
      for (int64_t i = rb; i < re; ++i) {
        const float* xp = xs + i * D_;
        float* yp = ys + i * D_;
        double s = 0;
        for (int64_t k = 0; k < D_; ++k) s += xp[k];
        const double m = s / static_cast<double>(D_);
        double v = 0;
        for (int64_t k = 0; k < D_; ++k) v += (xp[k] - m) * (xp[k] - m);
        const double r = 1 / std::sqrt(v / static_cast<double>(D_) + eps_);
        mr[2 * i] = m;
        mr[2 * i + 1] = r;
        for (int64_t k = 0; k < D_; ++k) {
          float y = static_cast<float>((xp[k] - m) * r);
          if (w) y = y * w[k] + (b ? b[k] : 0.f);
          yp[k] = y;
        }
      }
    });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const int64_t rows = x.numel() / D_;
    const float* xs = x.f32();
    const float* gs = io.gout->f32();
    const double* mr = static_cast<const double*>(io.tmp(0).data());
    const float* w = affine_ ? io.params : nullptr;
    if (io.gin[0]) {
      io.gin[0]->resize(DP_F32, x.shape());
      float* gx = io.gin[0]->f32();
      parallel_for(ctx.pool, rows, 1 + kElemGrain / D_, [&](int64_t rb, int64_t re) {
        for (int64_t i = rb; i < re; ++i) {
          const float* xp = xs + i * D_;
          const float* gp = gs + i * D_;
          const double m = mr[2 * i], r = mr[2 * i + 1];
          double sd = 0, sdx = 0;  // sums of d and of d * xhat
          for (int64_t k = 0; k < D_; ++k) {
            const double d = static_cast<double>(gp[k]) * (w ? w[k] : 1.f);
            sd += d;
            sdx += d * ((xp[k] - m) * r);
          }
          const double md = sd / static_cast<double>(D_), mdx = sdx / static_cast<double>(D_);
          float* gxp = gx + i * D_;
          for (int64_t k = 0; k < D_; ++k) {
            const double d = static_cast<double>(gp[k]) * (w ? w[k] : 1.f);
            gxp[k] = static_cast<float>(r * (d - md - (xp[k] - m) * r * mdx));
          }
        }
      });
    }
    if (!affine_) return;
    float* gw = io.grads;
    float* gb = bias_ ? io.grads + D_ : nullptr;
    // Columns in blocks of 64 (a cache line's worth per row): each worker
    // sweeps every row of its blocks, adding in row order.
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (D_ + kBlock - 1) / kBlock;
    parallel_for(ctx.pool, blocks, 1 + kElemGrain / (rows * kBlock + 1), [&](int64_t bb, int64_t be) {
      double aw[kBlock], ab[kBlock];
      for (int64_t blk = bb; blk < be; ++blk) {
        const int64_t k0 = blk * kBlock, n = std::min(kBlock, D_ - k0);
        for (int64_t k = 0; k < n; ++k) aw[k] = 0, ab[k] = 0;
        for (int64_t i = 0; i < rows; ++i) {
          const float* xp = xs + i * D_ + k0;
          const float* gp = gs + i * D_ + k0;
          const double m = mr[2 * i], r = mr[2 * i + 1];
          for (int64_t k = 0; k < n; ++k) {
            aw[k] += gp[k] * ((xp[k] - m) * r);
            ab[k] += gp[k];
          }
        }
        for (int64_t k = 0; k < n; ++k) {
          gw[k0 + k] += static_cast<float>(aw[k]);
          if (gb) gb[k0 + k] += static_cast<float>(ab[k]);
        }
      }
    });
  }
};
}  // namespace

std::unique_ptr<Layer> make_layer_norm(Args& a) {
  auto l = std::make_unique<LayerNorm>();
  const char* key = "normalized_shape";
  std::vector<int64_t> dims;
  if (!a.has(key)) fail(DP_ERR_MODEL, a.path_of(key) + ": required (an integer or a list of them, as torch.nn.LayerNorm's)");
  if (a.object().at(key).is_array())
    dims = a.integers(key, {});
  else
    dims = {a.required_integer(key, 1)};
  if (dims.empty() || dims.size() > DP_MAX_DIMS - 1)
    fail(DP_ERR_MODEL, a.path_of(key) + ": expected 1 to " + std::to_string(DP_MAX_DIMS - 1) + " dims, got " +
                           std::to_string(dims.size()));
  for (int64_t d : dims) {
    if (d < 1) fail(DP_ERR_MODEL, a.path_of(key) + ": expected dims of at least 1, got " + std::to_string(d));
    l->shape_.push(d);
  }
  l->shape_.checked_numel(a.path_of(key));
  l->eps_ = a.number("eps", 1e-5, 0, 1e30);
  l->affine_ = a.boolean("elementwise_affine", true);
  l->bias_ = a.boolean("bias", true);
  return l;
}

}  // namespace dp
