// NLLLoss (mean or sum reduction; class weights and ignore_index as PyTorch's) over
// log-probabilities [N, C] (a model ending in log_softmax) and int64 class
// targets [N]. As cross entropy, each replica returns its rows' share of the
// batch mean: sum_rows -w[t] x[t] / total, total the batch's rows, or with
// weights the sum of w[t] over its rows (ignored rows in neither:
// RunCtx::loss_total), or 1 for "sum"; the gradient is -w[t] / total at the target, 0
// elsewhere, times loss_scale.
#include <algorithm>

#include "layers/builtin.h"
#include "layers/loss_cross_entropy.h"
#include "layers/util.h"

namespace dp {

namespace {
class Nll final : public Loss, public NllAttrs {
 public:
  Shape target_shape(const Shape& out_sample, dp_dtype* dtype) const override {
    return class_target_shape("nll", out_sample, dtype);
  }

  double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const override {
    const int64_t n = out.shape()[0], C = out.shape().inner();
    check_targets("nll", target, n, C, ctx.sample_offset);
    const float* x = out.f32();
    const int64_t* t = target.i64();
    float* g = nullptr;
    if (gout) {
      gout->resize(DP_F32, out.shape());
      g = gout->f32();
      std::fill(g, g + n * C, 0.f);
    }
    const double total =
        divisor(ctx.loss_total >= 0 ? ctx.loss_total : static_cast<double>(ctx.batch_total > 0 ? ctx.batch_total : n));
    double loss = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (t[r] == ignore_index_) continue;  // counts for nothing, as in PyTorch
      const double w = weight_.empty() ? 1.0 : weight_[static_cast<size_t>(t[r])];
      loss -= w * x[r * C + t[r]];
      if (g) g[r * C + t[r]] = static_cast<float>(-w / total * ctx.loss_scale);
    }
    return loss / total;
  }

  double weight_of(const Tensor& target) const override { return ClassWeights::weight_of(target); }
  void check_target_values(const Shape& out_sample, const Tensor& target) const override {
    ClassWeights::check_target_values(out_sample, target);
  }
};

}  // namespace

std::unique_ptr<Loss> make_nll(Args& a) {
  auto l = std::make_unique<Nll>();
  read_class_weights(a, l.get());
  read_reduction(a, l.get());
  return l;
}

}  // namespace dp
