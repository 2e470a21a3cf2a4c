// MSELoss (mean over every element of the whole batch): each replica returns
// sum_its_elements (x - t)^2 / (batch_total * inner); with reduction "sum", the sum.
#include "layers/builtin.h"
#include "layers/loss_mse.h"
#include "layers/util.h"

namespace dp {

namespace {
class Mse final : public Loss, public MseAttrs {
 public:
  Shape target_shape(const Shape& out_sample, dp_dtype* dtype) const override {
    *dtype = DP_F32;
    return out_sample;
  }

  double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const override {
    const int64_t n = out.shape()[0], inner = out.shape().inner(), numel = n * inner;
    const double denom = divisor(static_cast<double>(ctx.batch_total > 0 ? ctx.batch_total : n) * static_cast<double>(inner));
    if (target.dtype() != DP_F32 || target.numel() != numel)
      fail(DP_ERR_SHAPE, "mse expects float32 targets of shape " + out.shape().str() + ", got " +
                             dtype_name(target.dtype()) + " " + target.shape().str());
    const float* x = out.f32();
    const float* t = target.f32();
    float* g = nullptr;
    if (gout) {
      gout->resize(DP_F32, out.shape());
      g = gout->f32();
    }
    const float k = static_cast<float>(2.0 / denom * ctx.loss_scale);
    double s = 0;
    for (int64_t i = 0; i < numel; ++i) {
      double d = static_cast<double>(x[i]) - t[i];
      s += d * d;
      if (g) g[i] = k * (x[i] - t[i]);
    }
    return s / denom;
  }
};

}  // namespace

std::unique_ptr<Loss> make_mse(Args& a) {
  auto l = std::make_unique<Mse>();
  read_reduction(a, l.get());
  return l;
}

}  // namespace dp
