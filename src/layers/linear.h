// Linear's hyperparameters and inferred shapes, apart from the layer class so
// that the CUDA op can read them (dynamic_cast<const LinearAttrs*>).
#pragma once
#include <cstdint>

namespace dp {

struct LinearAttrs {
  int64_t in_ = 0, out_ = 0;
  bool bias_ = true;
  int64_t rows_per_sample_ = 1;  // rows of the last dim per sample (input rank > 1)
};

}  // namespace dp
