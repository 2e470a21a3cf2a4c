// The per-element update rules of the optimizers, written once for the CPU
// loops (optimizer.cpp) and the CUDA kernels (backends/cuda/kernels.cu), so
// both backends apply PyTorch's formulas identically.
#pragma once
#include <cmath>

#include "core/hd.h"

namespace dp {

// Everything a step needs besides the arrays: filled by Optimizer::rule()
// after begin_step().
struct OptimRule {
  enum Kind { kSgd, kSgdMomentum, kSgdMomentumFirst, kSgdNesterov, kAdam } kind = kSgd;
  float lr = 0, wd = 0;
  float momentum = 0, damp = 1;  // damp = 1 - dampening
  bool nesterov = false;
  // Adam: c1 = 1 - beta1 and c2 = 1 - beta2 worked out in double, as PyTorch passes them (1 - float(0.999)
  // is 6.4e-6 relatively off); decay = 1 - lr*wd for AdamW.
  float b1 = 0, b2 = 0, c1 = 0, c2 = 0, eps = 0, decay = 1, step_size = 0, bc2_sqrt = 1;
};

// torch.optim.SGD without momentum.
DP_HD inline void sgd_plain(float& p, float g, const OptimRule& r) { p -= r.lr * (g + r.wd * p); }
// With momentum, first step: buf = d.
DP_HD inline void sgd_first(float& p, float g, float& buf, const OptimRule& r) {
  float d = g + r.wd * p;
  buf = d;
  p -= r.lr * (r.nesterov ? d + r.momentum * d : d);
}
DP_HD inline void sgd_momentum(float& p, float g, float& buf, const OptimRule& r) {
  buf = r.momentum * buf + r.damp * (g + r.wd * p);
  p -= r.lr * buf;
}
DP_HD inline void sgd_nesterov(float& p, float g, float& buf, const OptimRule& r) {
  float d = g + r.wd * p;
  buf = r.momentum * buf + r.damp * d;
  p -= r.lr * (d + r.momentum * buf);
}
// torch.optim.Adam / AdamW (wd = 0 and decay = 1 - lr*wd for AdamW), operation by operation as
// PyTorch's single-tensor step: exp_avg.lerp_(grad, 1 - beta1) (ATen's lerp: from the nearer
// end, kFromStart when 1 - beta1 < 0.5), exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
// value=1 - beta2), then param.addcdiv_(exp_avg, exp_avg_sq.sqrt() / bias_correction2_sqrt + eps,
// value=-step_size). Unfused: PyTorch's CPU vector kernels fuse some of these, so it is within an
// ulp or two (bindings/python/tests/test_parity.py pins the formulas). The CPU loop picks the
// lerp's end once, outside the loop, so that it vectorises.
template <bool kFromStart>
DP_HD inline void adam_from(float& p, float g, float& m, float& v, const OptimRule& r) {
  float pi = p * r.decay;
  float gi = g + r.wd * pi;
  m = kFromStart ? m + r.c1 * (gi - m) : gi - (gi - m) * (1 - r.c1);
  v = v * r.b2 + r.c2 * gi * gi;
  p = pi - r.step_size * m / (sqrtf(v) / r.bc2_sqrt + r.eps);
}
DP_HD inline bool adam_lerp_from_start(const OptimRule& r) { return fabsf(r.c1) < 0.5f; }
DP_HD inline void adam(float& p, float g, float& m, float& v, const OptimRule& r) {
  if (adam_lerp_from_start(r))
    adam_from<true>(p, g, m, v, r);
  else
    adam_from<false>(p, g, m, v, r);
}

}  // namespace dp
