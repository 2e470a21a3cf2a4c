// GELU: x * Phi(x) (approximate "none"), or PyTorch's tanh approximation.
#include "layers/activations.h"
#include "layers/builtin.h"
#include "layers/elementwise.h"

namespace dp {
std::unique_ptr<Layer> make_gelu(Args& a) {
  auto l = std::make_unique<Elementwise<GeluOp>>();
  std::string approx = a.string("approximate", "none");
  if (approx != "none" && approx != "tanh")
    fail(DP_ERR_MODEL, a.path_of("approximate") + ": expected \"none\" or \"tanh\", got \"" + approx + "\"");
  l->op.tanh_approx = approx == "tanh";
  return l;
}
}  // namespace dp
