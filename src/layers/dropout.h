// Dropout's hyperparameter, apart from the layer class so that the CUDA op can
// read it (dynamic_cast<const DropoutAttrs*>).
#pragma once

namespace dp {

struct DropoutAttrs {
  double p_ = 0.5;
};

}  // namespace dp
