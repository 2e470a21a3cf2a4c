// CrossEntropyLoss (mean reduction, optional label smoothing) over logits
// [N, C] and int64 class targets [N]. Each replica returns its rows' share of
// the batch mean: sum_rows loss_row / batch_total; the gradient is of
// loss_scale times that (1 exactly, but when accumulating).
//   loss_row = (1 - ls) * -logp[t] + ls / C * sum_c -logp[c]
//   d loss_row / d x = softmax(x) - ((1 - ls) * onehot(t) + ls / C)
#include <cmath>

#include "layers/builtin.h"
#include "layers/loss_cross_entropy.h"
#include "layers/util.h"

namespace dp {

namespace {
class CrossEntropy final : public Loss, public CrossEntropyAttrs {
 public:
  Shape target_shape(const Shape& out_sample, dp_dtype* dtype) const override {
    if (out_sample.ndim != 1)
      fail(DP_ERR_SHAPE, "cross_entropy expects model output of shape [C] per sample, got " + out_sample.str());
    *dtype = DP_I64;
    return Shape{};
  }

  double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const override {
    const int64_t n = out.shape()[0], C = out.shape().inner();
    const float* x = out.f32();
    if (target.dtype() != DP_I64 || target.numel() != n)
      fail(DP_ERR_SHAPE, std::string("cross_entropy expects int64 targets of shape [") + std::to_string(n) + "], got " +
                             dtype_name(target.dtype()) + " " + target.shape().str());
    check_class_targets(target, C, ctx.sample_offset);
    const int64_t* t = target.i64();
    float* g = nullptr;
    if (gout) {
      gout->resize(DP_F32, out.shape());
      g = gout->f32();
    }
    const double total = static_cast<double>(ctx.batch_total > 0 ? ctx.batch_total : n);
    const double ls = smoothing_;
    double loss = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float* xr = x + r * C;
      float mx = -INFINITY;
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, xr[c]);
      double se = 0, sx = 0;
      for (int64_t c = 0; c < C; ++c) {
        se += std::exp(static_cast<double>(xr[c]) - mx);
        sx += xr[c];
      }
      const double lse = mx + std::log(se);
      // -logp[c] = lse - x[c]
      double lr = (1 - ls) * (lse - xr[t[r]]);
      if (ls > 0) lr += ls / static_cast<double>(C) * (static_cast<double>(C) * lse - sx);
      loss += lr;
      if (g) {
        float* gr = g + r * C;
        const double off = ls / static_cast<double>(C);
        for (int64_t c = 0; c < C; ++c) {
          double p = std::exp(static_cast<double>(xr[c]) - lse);
          double y = off + (c == t[r] ? 1 - ls : 0);
          gr[c] = static_cast<float>((p - y) / total * ctx.loss_scale);
        }
      }
    }
    return loss / total;
  }
};

}  // namespace

std::unique_ptr<Loss> make_cross_entropy(Args& a) {
  auto l = std::make_unique<CrossEntropy>();
  l->smoothing_ = a.number("label_smoothing", 0.0, 0.0, 1.0);  // [0, 1] as PyTorch (at 1: the uniform target)
  require_mean_reduction(a);
  return l;
}

}  // namespace dp
