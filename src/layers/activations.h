// The element-wise activations' formulas: f(x) and, given x and y = f(x),
// dy/dx. DP_HD so that the CPU layer (Elementwise<Op>) and the CUDA op run
// the very same code; in namespace dp, not an anonymous one, so that
// Elementwise<ReluOp> is one type in every translation unit (the CUDA op
// finds its Op by dynamic_cast).
#pragma once
#include <cmath>

#include "core/hd.h"

namespace dp {

struct ReluOp {
  // x < 0 ? 0 : x, not x > 0 ? x : 0: a NaN must propagate, as in torch.relu,
  // or a diverging model would train on silently.
  DP_HD float f(float x) const { return x < 0.f ? 0.f : x; }
  DP_HD float df(float x, float) const { return x > 0.f ? 1.f : 0.f; }
};

struct LeakyReluOp {
  float slope = 0.01f;
  DP_HD float f(float x) const { return x > 0.f ? x : slope * x; }
  DP_HD float df(float x, float) const { return x > 0.f ? 1.f : slope; }
};

struct SigmoidOp {
  DP_HD float f(float x) const {
    // Stable for large |x|.
    if (x >= 0.f) return 1.f / (1.f + std::exp(-x));
    float e = std::exp(x);
    return e / (1.f + e);
  }
  DP_HD float df(float, float y) const { return y * (1.f - y); }
};

struct TanhOp {
  DP_HD float f(float x) const { return std::tanh(x); }
  DP_HD float df(float, float y) const { return 1.f - y * y; }
};

// GELU: x * Phi(x) (approximate "none"), or PyTorch's tanh approximation.
struct GeluOp {
  bool tanh_approx = false;
  DP_HD float f(float x) const {
    if (tanh_approx) {
      const float k = 0.7978845608028654f;  // sqrt(2/pi)
      return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
    }
    return 0.5f * x * (1.f + std::erf(x * 0.7071067811865476f));
  }
  DP_HD float df(float x, float) const {
    if (tanh_approx) {
      const float k = 0.7978845608028654f;
      float t = std::tanh(k * (x + 0.044715f * x * x * x));
      return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * x * x);
    }
    float cdf = 0.5f * (1.f + std::erf(x * 0.7071067811865476f));
    float pdf = 0.3989422804014327f * std::exp(-0.5f * x * x);
    return cdf + x * pdf;
  }
};

}  // namespace dp
