// GELU: x * Phi(x) (approximate "none"), or PyTorch's tanh approximation.
#include <cmath>

#include "layers/builtin.h"
#include "layers/elementwise.h"

namespace dp {
namespace {
struct GeluOp {
  bool tanh_approx = false;
  float f(float x) const {
    if (tanh_approx) {
      const float k = 0.7978845608028654f;  // sqrt(2/pi)
      return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
    }
    return 0.5f * x * (1.f + std::erf(x * 0.7071067811865476f));
  }
  float df(float x, float) const {
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
}  // namespace

std::unique_ptr<Layer> make_gelu(Args& a) {
  auto l = std::make_unique<Elementwise<GeluOp>>();
  std::string approx = a.string("approximate", "none");
  if (approx != "none" && approx != "tanh")
    fail(DP_ERR_MODEL, a.path_of("approximate") + ": expected \"none\" or \"tanh\", got \"" + approx + "\"");
  l->op.tanh_approx = approx == "tanh";
  return l;
}
}  // namespace dp
