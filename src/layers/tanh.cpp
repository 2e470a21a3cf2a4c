#include "layers/activations.h"
#include "layers/builtin.h"
#include "layers/elementwise.h"

namespace dp {
std::unique_ptr<Layer> make_tanh(Args&) { return std::make_unique<Elementwise<TanhOp>>(); }
}  // namespace dp
