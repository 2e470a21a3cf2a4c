#include "layers/activations.h"
#include "layers/builtin.h"
#include "layers/elementwise.h"

namespace dp {
std::unique_ptr<Layer> make_sigmoid(Args&) { return std::make_unique<Elementwise<SigmoidOp>>(); }
}  // namespace dp
