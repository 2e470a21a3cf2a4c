// LayerNorm's arguments and inferred size, apart from the layer class so that
// the ONNX exporter can read them (dynamic_cast<const LayerNormAttrs*>).
#pragma once
#include <cstdint>

#include "tensor/shape.h"

namespace dp {

struct LayerNormAttrs {
  Shape shape_;  // normalized_shape: the trailing dims of each sample
  double eps_ = 1e-5;
  bool affine_ = true, bias_ = true;  // elementwise_affine; bias (only with it)
  int64_t D_ = 1;  // shape_'s elements: the values each row normalizes
};

}  // namespace dp
