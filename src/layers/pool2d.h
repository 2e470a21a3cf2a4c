// MaxPool2d's and AvgPool2d's hyperparameters and the shapes infer() records,
// shared by the CPU layers (max_pool2d.cpp, avg_pool2d.cpp) and their CUDA
// implementation (backends/cuda/ops/pool.cu), which finds them with
// dynamic_cast<const MaxPool2dAttrs*>(&layer) / <const AvgPool2dAttrs*>.
#pragma once
#include <cstdint>

namespace dp {

struct MaxPool2dAttrs {
  int64_t kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, ph_ = 0, pw_ = 0, dh_ = 1, dw_ = 1;
  bool ceil_ = false;
  int64_t C_ = 0, H_ = 0, W_ = 0, Ho_ = 0, Wo_ = 0;
};

struct AvgPool2dAttrs {
  int64_t kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, ph_ = 0, pw_ = 0;
  bool ceil_ = false, include_pad_ = true;
  int64_t C_ = 0, H_ = 0, W_ = 0, Ho_ = 0, Wo_ = 0;
};

}  // namespace dp
