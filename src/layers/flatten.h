// Flatten's settings and inferred output, shared with its CUDA op.
#pragma once
#include <cstdint>

#include "tensor/shape.h"

namespace dp {

struct FlattenAttrs {
  int64_t start_ = 1, end_ = -1;
  Shape out_;  // per sample, from infer()
};

}  // namespace dp
