// Cross entropy's hyperparameters, apart from the loss class so that the CUDA
// loss can read it (dynamic_cast<const CrossEntropyAttrs*>).
#pragma once
#include <string>
#include <vector>

#include "core/error.h"
#include "tensor/tensor.h"

namespace dp {

// Class targets (int64 [n], host memory) must lie in [0, classes), or equal
// *ignore where given (cross entropy's ignore_index); row r is row first_row
// + r of the batch. Both backends check on the host, so a GPU never reads
// outside its logits.
inline void check_class_targets(const Tensor& target, int64_t classes, int64_t first_row,
                                const int64_t* ignore = nullptr) {
  const int64_t* t = target.i64();
  for (int64_t r = 0, n = target.numel(); r < n; ++r)
    if ((t[r] < 0 || t[r] >= classes) && !(ignore && t[r] == *ignore))
      fail(DP_ERR_INVALID_ARGUMENT, "target " + std::to_string(t[r]) + " at row " + std::to_string(first_row + r) +
                                        " is outside [0, " + std::to_string(classes) + ")" +
                                        (ignore ? " and is not ignore_index " + std::to_string(*ignore) : ""));
}

// As torch.nn.CrossEntropyLoss's arguments.
struct CrossEntropyAttrs {
  double smoothing_ = 0;         // label_smoothing
  std::vector<double> weight_;   // weight: one per class, or none
  int64_t ignore_index_ = -100;  // rows with this target count for nothing
};

}  // namespace dp
