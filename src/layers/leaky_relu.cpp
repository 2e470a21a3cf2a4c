#include "layers/activations.h"
#include "layers/builtin.h"
#include "layers/elementwise.h"

namespace dp {
std::unique_ptr<Layer> make_leaky_relu(Args& a) {
  auto l = std::make_unique<Elementwise<LeakyReluOp>>();
  l->op.slope = static_cast<float>(a.number("negative_slope", 0.01, -1e30, 1e30));
  return l;
}
}  // namespace dp
