// CrossEntropyLoss (mean or sum reduction; label smoothing, class weights and
// ignore_index as PyTorch's) over logits [N, C] and int64 class targets [N].
// Each replica returns its rows' share of the batch mean: sum_rows loss_row /
// total, where total is the batch's rows, or with weights the sum of w[t]
// over its rows (ignored rows in neither: RunCtx::loss_total), or 1 for
// reduction "sum"; the gradient
// is of loss_scale times that (1 exactly, but when accumulating).
//   loss_row = (1 - ls) * -logp[t] + ls / C * sum_c -logp[c]
//   d loss_row / d x = softmax(x) - ((1 - ls) * onehot(t) + ls / C)
// (with weights, each -logp[c] weighs w[c]: see forward_backward).
#include <algorithm>
#include <cmath>
#include <limits>

#include "layers/builtin.h"
#include "layers/loss_cross_entropy.h"
#include "layers/util.h"

namespace dp {

namespace {
class CrossEntropy final : public Loss, public CrossEntropyAttrs {
 public:
  Shape target_shape(const Shape& out_sample, dp_dtype* dtype) const override {
    return class_target_shape("cross_entropy", out_sample, dtype);
  }

  double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const override {
    const int64_t n = out.shape()[0], C = out.shape().inner();
    const float* x = out.f32();
    check_targets("cross_entropy", target, n, C, ctx.sample_offset);
    const int64_t* t = target.i64();
    float* g = nullptr;
    if (gout) {
      gout->resize(DP_F32, out.shape());
      g = gout->f32();
    }
    const double total =
        divisor(ctx.loss_total >= 0 ? ctx.loss_total : static_cast<double>(ctx.batch_total > 0 ? ctx.batch_total : n));
    const double ls = smoothing_;
    const double* w = weight_.empty() ? nullptr : weight_.data();
    double wsum = 0;  // sum of the class weights (the smoothing term's)
    if (w)
      for (int64_t c = 0; c < C; ++c) wsum += w[c];
    double loss = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float* xr = x + r * C;
      float* gr = g ? g + r * C : nullptr;
      if (t[r] == ignore_index_) {  // counts for nothing, as in PyTorch
        if (gr) std::fill(gr, gr + C, 0.f);
        continue;
      }
      float mx = -INFINITY;
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, xr[c]);
      double se = 0, sx = 0;
      for (int64_t c = 0; c < C; ++c) {
        se += std::exp(static_cast<double>(xr[c]) - mx);
        sx += w ? w[c] * xr[c] : xr[c];
      }
      const double lse = mx + std::log(se);
      if (!w) {
        // -logp[c] = lse - x[c]
        double lr = (1 - ls) * (lse - xr[t[r]]);
        if (ls > 0) lr += ls / static_cast<double>(C) * (static_cast<double>(C) * lse - sx);
        loss += lr;
        if (gr) {
          const double off = ls / static_cast<double>(C);
          for (int64_t c = 0; c < C; ++c) {
            double p = std::exp(static_cast<double>(xr[c]) - lse);
            double y = off + (c == t[r] ? 1 - ls : 0);
            gr[c] = static_cast<float>((p - y) / total * ctx.loss_scale);
          }
        }
        continue;
      }
      // Class weights, as PyTorch: (1 - ls) w[t] (-logp[t]) + ls / C sum_c w[c] (-logp[c]),
      // whose gradient is p[c] ((1 - ls) w[t] + ls / C sum w) - ((1 - ls) w[t] [c = t] + ls / C w[c]).
      const double wt = w[t[r]], a = (1 - ls) * wt, b = ls / static_cast<double>(C);
      double lr = a * (lse - xr[t[r]]);
      if (ls > 0) lr += b * (wsum * lse - sx);
      loss += lr;
      if (gr) {
        const double pw = a + b * wsum;
        for (int64_t c = 0; c < C; ++c) {
          double p = std::exp(static_cast<double>(xr[c]) - lse);
          double y = b * w[c] + (c == t[r] ? a : 0);
          gr[c] = static_cast<float>((p * pw - y) / total * ctx.loss_scale);
        }
      }
    }
    return loss / total;
  }

  double weight_of(const Tensor& target) const override { return ClassWeights::weight_of(target); }
  void check_target_values(const Shape& out_sample, const Tensor& target) const override {
    ClassWeights::check_target_values(out_sample, target);
  }
};

}  // namespace

std::unique_ptr<Loss> make_cross_entropy(Args& a) {
  auto l = std::make_unique<CrossEntropy>();
  l->smoothing_ = a.number("label_smoothing", 0.0, 0.0, 1.0);  // [0, 1] as PyTorch (at 1: the uniform target)
  read_class_weights(a, l.get());
  read_reduction(a, l.get());
  return l;
}

}  // namespace dp
