// L1Loss, SmoothL1Loss and HuberLoss (mean reduction), with PyTorch's
// formulas, d = x - t:
//   l1:        |d|,                                  d/dx sign(d) (0 at 0)
//   smooth_l1: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta;
//              beta = 0 is l1 (as F.smooth_l1_loss)
//   huber:     0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)
// At the joins both sides agree; the derivative there is PyTorch's
// (smooth_l1: ±1, huber: ±delta).
#include <cmath>

#include "layers/builtin.h"
#include "layers/loss_pointwise.h"
#include "layers/util.h"

namespace dp {

namespace {
double sign(double d) { return d > 0 ? 1 : d < 0 ? -1 : 0; }

class L1 final : public PointwiseLoss, public L1Attrs {
 public:
  double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const override {
    return pointwise_loss(*this, "l1", ctx, out, target, gout, [](float x, float t, int64_t, double* g) {
      const double d = static_cast<double>(x) - t;
      *g = sign(d);
      return std::fabs(d);
    });
  }
};

class SmoothL1 final : public PointwiseLoss, public SmoothL1Attrs {
 public:
  double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const override {
    const double beta = beta_;
    return pointwise_loss(*this, "smooth_l1", ctx, out, target, gout, [beta](float x, float t, int64_t, double* g) {
      const double d = static_cast<double>(x) - t, a = std::fabs(d);
      if (beta == 0) {
        *g = sign(d);
        return a;
      }
      if (a < beta) {
        *g = d / beta;
        return 0.5 * d * d / beta;
      }
      *g = sign(d);
      return a - 0.5 * beta;
    });
  }
};

class Huber final : public PointwiseLoss, public HuberAttrs {
 public:
  double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const override {
    const double delta = delta_;
    return pointwise_loss(*this, "huber", ctx, out, target, gout, [delta](float x, float t, int64_t, double* g) {
      const double d = static_cast<double>(x) - t, a = std::fabs(d);
      if (a < delta) {
        *g = d;
        return 0.5 * d * d;
      }
      *g = delta * sign(d);
      return delta * (a - 0.5 * delta);
    });
  }
};

}  // namespace

std::unique_ptr<Loss> make_l1(Args& a) {
  auto l = std::make_unique<L1>();
  read_reduction(a, l.get());
  return l;
}

std::unique_ptr<Loss> make_smooth_l1(Args& a) {
  auto l = std::make_unique<SmoothL1>();
  l->beta_ = a.number("beta", 1.0, 0.0, std::numeric_limits<double>::max());  // >= 0, as PyTorch
  read_reduction(a, l.get());
  return l;
}

std::unique_ptr<Loss> make_huber(Args& a) {
  auto l = std::make_unique<Huber>();
  l->delta_ = a.number("delta", 1.0, 0.0, std::numeric_limits<double>::max());
  if (!(l->delta_ > 0))  // PyTorch: "huber_loss does not support non-positive values for delta"
    fail(DP_ERR_MODEL, a.path_of("delta") + ": expected a number > 0, got 0");
  read_reduction(a, l.get());
  return l;
}

}  // namespace dp
