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
  float b1 = 0, b2 = 0, eps = 0, decay = 1, step_size = 0, bc2_sqrt = 1;  // Adam; decay = 1 - lr*wd for AdamW
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
// torch.optim.Adam / AdamW (wd = 0 and decay = 1 - lr*wd for AdamW).
DP_HD inline void adam(float& p, float g, float& m, float& v, const OptimRule& r) {
  float pi = p * r.decay;
  float gi = g + r.wd * pi;
  m = r.b1 * m + (1 - r.b1) * gi;
  v = r.b2 * v + (1 - r.b2) * gi * gi;
  p = pi - r.step_size * m / (sqrtf(v) / r.bc2_sqrt + r.eps);
}

}  // namespace dp
