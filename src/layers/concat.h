// Concat's dim and inferred shapes, apart from the layer class so that the
// CUDA op can read them (dynamic_cast<const ConcatAttrs*>).
#pragma once
#include <cstdint>
#include <vector>

namespace dp {

struct ConcatAttrs {
  int64_t dim_ = 1;
  int64_t outer_ = 1;           // per sample, product of the dims before dim
  std::vector<int64_t> chunk_;  // per input: size(dim) * product of later dims
  int64_t total_ = 0;           // sum of chunk_
};

}  // namespace dp
