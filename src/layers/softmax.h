// Softmax's and log_softmax's dim and inferred shape, apart from the layer class so that the
// CUDA op can read them (dynamic_cast<const SoftmaxAttrs*>).
#pragma once
#include <cstdint>

namespace dp {

struct SoftmaxAttrs {
  bool log_ = false;  // log_softmax: log(softmax(x)), as x - max - log(sum exp(x - max))
  int64_t dim_ = -1;
  int64_t outer_ = 1, D_ = 1, inner_ = 1;  // per sample: [outer, D, inner]
};

}  // namespace dp
