// BatchNorm's hyperparameters and inferred shape, shared by the CPU layer
// (batch_norm.cpp) and its CUDA implementation (backends/cuda/ops/batch_norm.cu),
// which finds them with dynamic_cast<const BatchNormAttrs*>(&layer).
#pragma once
#include <cstdint>
#include <string>

namespace dp {

struct BatchNormAttrs {
  std::string kind_;  // "batch_norm", "batch_norm1d", "batch_norm2d"
  int64_t C_arg_ = 0, C_ = 0, S_ = 1;  // num_features as given; channels (dim 0); elements per channel per sample
  double eps_ = 1e-5, momentum_ = 0.1;
  bool affine_ = true, track_ = true;
};

}  // namespace dp
