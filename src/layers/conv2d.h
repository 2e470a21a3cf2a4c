// Conv2d's hyperparameters and the shapes infer() records, shared by the CPU
// layer (conv2d.cpp) and its CUDA implementation (backends/cuda/ops/conv2d.cu),
// which finds them with dynamic_cast<const Conv2dAttrs*>(&layer).
#pragma once
#include <cstdint>
#include <string>

namespace dp {

struct Conv2dAttrs {
  int64_t cin_ = 0, cout_ = 0, groups_ = 1;
  int64_t kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, ph_ = 0, pw_ = 0, dh_ = 1, dw_ = 1;
  bool bias_ = true;
  int64_t H_ = 0, W_ = 0, Ho_ = 0, Wo_ = 0;  // per-sample input and output planes (infer)
  std::string groups_path_;

  bool pointwise() const {
    return kh_ == 1 && kw_ == 1 && sh_ == 1 && sw_ == 1 && ph_ == 0 && pw_ == 0;
  }
  int64_t K() const { return cin_ / groups_ * kh_ * kw_; }   // gemm depth per group
  int64_t col_rows() const { return cin_ * kh_ * kw_; }
  int64_t wsize() const { return cout_ * K(); }              // weight floats; the bias follows
};

}  // namespace dp
