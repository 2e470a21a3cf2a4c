#include "layers/builtin.h"
#include "layers/elementwise.h"

namespace dp {
namespace {
struct LeakyReluOp {
  float slope = 0.01f;
  float f(float x) const { return x > 0.f ? x : slope * x; }
  float df(float x, float) const { return x > 0.f ? 1.f : slope; }
};
}  // namespace

std::unique_ptr<Layer> make_leaky_relu(Args& a) {
  auto l = std::make_unique<Elementwise<LeakyReluOp>>();
  l->op.slope = static_cast<float>(a.number("negative_slope", 0.01, -1e30, 1e30));
  return l;
}
}  // namespace dp
