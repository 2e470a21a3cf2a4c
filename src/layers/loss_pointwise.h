// The element-wise losses of float32 targets shaped as the model's output
// (l1, smooth_l1, huber, bce, bce_with_logits; mse has its own file), averaged
// as PyTorch's reduction="mean" over every element of the whole batch: each
// replica returns the sum of its elements' losses / (batch_total * inner),
// or with reduction "sum" the sum itself. Their hyperparameters are here,
// apart from the loss classes, for a CUDA loss to read (dynamic_cast).
#pragma once
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/layer.h"

namespace dp {

// torch.nn.SmoothL1Loss's beta (0: L1Loss) and HuberLoss's delta.
struct SmoothL1Attrs {
  double beta_ = 1;
};
struct HuberAttrs {
  double delta_ = 1;
};
struct L1Attrs {};

// torch.nn.BCELoss's and BCEWithLogitsLoss's weight and pos_weight: one
// value per element of the output's last dim (PyTorch broadcasts them
// there: per class, in multi-label training), or none.
struct BceAttrs {
  std::vector<double> weight_;
  std::vector<double> pos_weight_;  // bce_with_logits only
  bool logits_ = false;             // bce_with_logits: the output is a logit, not a probability
};

// A loss of float32 targets of the output's shape.
class PointwiseLoss : public Loss {
 public:
  Shape target_shape(const Shape& out_sample, dp_dtype* dtype) const override {
    *dtype = DP_F32;
    return out_sample;
  }
};

// Float32 targets of the output's shape, or DP_ERR_SHAPE.
inline void check_same_shape_target(const char* name, const Tensor& out, const Tensor& target) {
  if (target.dtype() != DP_F32 || target.numel() != out.numel())
    fail(DP_ERR_SHAPE, std::string(name) + " expects float32 targets of shape " + out.shape().str() + ", got " +
                           dtype_name(target.dtype()) + " " + target.shape().str());
}

// The loop every element-wise loss shares: f(x, t, c, &d) returns one
// element's loss and sets d to its derivative in x; c is the element's index
// along the output's last dim. Sums in double, in element order; divided as
// `loss`'s reduction says.
template <class F>
double pointwise_loss(const Loss& loss, const char* name, const RunCtx& ctx, const Tensor& out, const Tensor& target,
                      Tensor* gout, const F& f) {
  const int64_t n = out.shape()[0], inner = out.shape().inner(), numel = n * inner;
  const int64_t last = out.shape().ndim > 1 ? out.shape()[out.shape().ndim - 1] : 1;
  check_same_shape_target(name, out, target);
  const double denom =
      loss.divisor(static_cast<double>(ctx.batch_total > 0 ? ctx.batch_total : n) * static_cast<double>(inner));
  const float* x = out.f32();
  const float* t = target.f32();
  float* g = nullptr;
  if (gout) {
    gout->resize(DP_F32, out.shape());
    g = gout->f32();
  }
  const double k = ctx.loss_scale / denom;
  double s = 0, d = 0;
  for (int64_t i = 0; i < numel; ++i) {
    s += f(x[i], t[i], i % last, &d);
    if (g) g[i] = static_cast<float>(k * d);
  }
  return s / denom;
}

}  // namespace dp
