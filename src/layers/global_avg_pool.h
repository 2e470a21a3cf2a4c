// GlobalAvgPool's inferred shape, shared by the CPU layer (global_avg_pool.cpp)
// and its CUDA implementation (backends/cuda/ops/pool.cu), which finds it with
// dynamic_cast<const GlobalAvgPoolAttrs*>(&layer).
#pragma once
#include <cstdint>

namespace dp {

struct GlobalAvgPoolAttrs {
  int64_t C_ = 0, HW_ = 0;  // channels, and elements per plane
};

}  // namespace dp
