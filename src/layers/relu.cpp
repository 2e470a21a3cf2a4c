#include "layers/builtin.h"
#include "layers/elementwise.h"

namespace dp {
namespace {
struct ReluOp {
  // x < 0 ? 0 : x, not x > 0 ? x : 0: a NaN must propagate, as in torch.relu,
  // or a diverging model would train on silently.
  float f(float x) const { return x < 0.f ? 0.f : x; }
  float df(float x, float) const { return x > 0.f ? 1.f : 0.f; }
};
}  // namespace

std::unique_ptr<Layer> make_relu(Args&) { return std::make_unique<Elementwise<ReluOp>>(); }
}  // namespace dp
