#include <cmath>

#include "layers/builtin.h"
#include "layers/elementwise.h"

namespace dp {
namespace {
struct SigmoidOp {
  float f(float x) const {
    // Stable for large |x|.
    if (x >= 0.f) return 1.f / (1.f + std::exp(-x));
    float e = std::exp(x);
    return e / (1.f + e);
  }
  float df(float, float y) const { return y * (1.f - y); }
};
}  // namespace

std::unique_ptr<Layer> make_sigmoid(Args&) { return std::make_unique<Elementwise<SigmoidOp>>(); }
}  // namespace dp
