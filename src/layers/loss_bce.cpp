// BCELoss and BCEWithLogitsLoss (mean reduction) with PyTorch's formulas; w
// is `weight` (1 without), p is `pos_weight` (1 without), both per element
// of the output's last dim:
//   bce:             w (-(t max(log x, -100) + (1 - t) max(log(1 - x), -100))),
//                    d/dx w (x - t) / max(x (1 - x), 1e-12); x in [0, 1]
//   bce_with_logits: w ((1 - t) x + (1 + (p - 1) t) (log(1 + e^-|x|) + max(-x, 0))),
//                    d/dx w ((p t + 1 - t) sigmoid(x) - p t)
// (the logits form is log-sigmoid's stable form: a sigmoid then bce loses
// precision where sigmoid rounds to 0 or 1).
#include <cmath>
#include <cstdio>
#include <limits>

#include "layers/builtin.h"
#include "layers/loss_pointwise.h"
#include "layers/util.h"

namespace dp {

namespace {
class Bce final : public PointwiseLoss, public BceAttrs {
 public:
  Shape target_shape(const Shape& out_sample, dp_dtype* dtype) const override {
    const int64_t last = out_sample.ndim ? out_sample[out_sample.ndim - 1] : 1;
    for (const auto* v : {&weight_, &pos_weight_})
      if (!v->empty() && static_cast<int64_t>(v->size()) != last)
        fail(DP_ERR_SHAPE, std::string(logits_ ? "bce_with_logits" : "bce") + "'s " +
                               (v == &weight_ ? "weight" : "pos_weight") + " has " + std::to_string(v->size()) +
                               " values for a model output of " + out_sample.str() +
                               " per sample: give one per element of its last dim (" + std::to_string(last) + ")");
    return PointwiseLoss::target_shape(out_sample, dtype);
  }

  double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const override {
    const double* w = weight_.empty() ? nullptr : weight_.data();
    if (logits_) {
      const double* p = pos_weight_.empty() ? nullptr : pos_weight_.data();
      return pointwise_loss(*this, "bce_with_logits", ctx, out, target, gout, [w, p](float xf, float tf, int64_t c, double* g) {
        const double x = xf, t = tf, pw = p ? p[c] : 1, wc = w ? w[c] : 1;
        const double sig = x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
        *g = wc * ((pw * t + 1 - t) * sig - pw * t);
        return wc * ((1 - t) * x + (1 + (pw - 1) * t) * (std::log1p(std::exp(-std::fabs(x))) + std::max(-x, 0.0)));
      });
    }
    check_same_shape_target("bce", out, target);
    check_probabilities(ctx, out);
    return pointwise_loss(*this, "bce", ctx, out, target, gout, [w](float xf, float tf, int64_t c, double* g) {
      const double x = xf, t = tf, wc = w ? w[c] : 1;
      *g = wc * (x - t) / std::max(x * (1 - x), 1e-12);
      return wc * -(t * std::max(std::log(x), -100.0) + (1 - t) * std::max(std::log(1 - x), -100.0));
    });
  }

  // As PyTorch's "all elements of target should be between 0 and 1" (bce
  // only: with logits any target is taken, as PyTorch does).
  void check_target_values(const Shape& out_sample, const Tensor& target) const override {
    if (logits_) return;
    const float* t = target.f32();
    const int64_t inner = out_sample.numel();
    for (int64_t i = 0, n = target.numel(); i < n; ++i)
      if (!(t[i] >= 0 && t[i] <= 1)) {
        char v[32];
        std::snprintf(v, sizeof v, "%.9g", t[i]);
        fail(DP_ERR_INVALID_ARGUMENT, std::string("bce expects targets in [0, 1], got ") + v + " at row " +
                                          std::to_string(inner > 0 ? i / inner : 0));
      }
  }

 private:
  // As PyTorch's "all elements of input should be between 0 and 1" (a NaN
  // passes, for the step's NaN check to refuse).
  static void check_probabilities(const RunCtx& ctx, const Tensor& out) {
    const float* x = out.f32();
    const int64_t inner = out.shape().inner();
    for (int64_t i = 0, n = out.numel(); i < n; ++i)
      if (x[i] < 0 || x[i] > 1) {
        char v[32];
        std::snprintf(v, sizeof v, "%.9g", x[i]);
        fail(DP_ERR_INVALID_ARGUMENT, std::string("bce expects the model's outputs in [0, 1] (probabilities: end the "
                                                  "model with sigmoid, or use bce_with_logits on its logits), got ") +
                                          v + " at row " + std::to_string(ctx.sample_offset + i / inner));
      }
  }
};

std::unique_ptr<Bce> make(Args& a, bool logits) {
  auto l = std::make_unique<Bce>();
  l->logits_ = logits;
  const double big = std::numeric_limits<double>::max();
  l->weight_ = a.numbers("weight", {}, 0, 0.0, big);  // one per element of the last dim: target_shape checks
  if (logits) l->pos_weight_ = a.numbers("pos_weight", {}, 0, 0.0, big);
  read_reduction(a, l.get());
  return l;
}
}  // namespace

std::unique_ptr<Loss> make_bce(Args& a) { return make(a, false); }
std::unique_ptr<Loss> make_bce_with_logits(Args& a) { return make(a, true); }

}  // namespace dp
