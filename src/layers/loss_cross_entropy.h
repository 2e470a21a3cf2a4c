// Cross entropy's and nll's hyperparameters, apart from the loss classes so
// that the CUDA loss can read them (dynamic_cast<const CrossEntropyAttrs*>).
#pragma once
#include <limits>
#include <string>
#include <vector>

#include "core/args.h"
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

// The class weights and ignored target of cross_entropy and nll, as
// torch.nn.CrossEntropyLoss's and NLLLoss's weight and ignore_index.
struct ClassWeights {
  std::vector<double> weight_;   // weight: one per class, or none
  int64_t ignore_index_ = -100;  // rows with this target count for nothing

  // What rows of class targets weigh in the mean (Loss::weight_of): the sum
  // of w[t], or their number without weights, ignored rows left out.
  double weight_of(const Tensor& target) const {
    if (target.dtype() != DP_I64) return 0;
    const int64_t* t = target.i64();
    const int64_t classes = static_cast<int64_t>(weight_.size());
    double s = 0;
    for (int64_t r = 0, n = target.numel(); r < n; ++r) {
      if (t[r] == ignore_index_) continue;
      if (weight_.empty())
        s += 1;
      else if (t[r] >= 0 && t[r] < classes)
        s += weight_[static_cast<size_t>(t[r])];
    }
    return s;
  }

  // A model output of [C] per sample and one weight per class; the target
  // is one int64 class index per sample.
  Shape class_target_shape(const char* loss, const Shape& out_sample, dp_dtype* dtype) const {
    if (out_sample.ndim != 1)
      fail(DP_ERR_SHAPE, std::string(loss) + " expects model output of shape [C] per sample, got " + out_sample.str());
    if (!weight_.empty() && static_cast<int64_t>(weight_.size()) != out_sample[0])
      fail(DP_ERR_SHAPE, std::string(loss) + "'s weight has " + std::to_string(weight_.size()) +
                             " values for a model of " + std::to_string(out_sample[0]) + " classes: give one per class");
    *dtype = DP_I64;
    return Shape{};
  }

  // The values of a whole call's targets (Loss::check_target_values).
  void check_target_values(const Shape& out_sample, const Tensor& target) const {
    check_class_targets(target, out_sample.numel(), 0, &ignore_index_);
  }

  // The rows' targets: int64 [n], each in range or ignored.
  void check_targets(const char* loss, const Tensor& target, int64_t n, int64_t classes, int64_t first_row) const {
    if (target.dtype() != DP_I64 || target.numel() != n)
      fail(DP_ERR_SHAPE, std::string(loss) + " expects int64 targets of shape [" + std::to_string(n) + "], got " +
                             dtype_name(target.dtype()) + " " + target.shape().str());
    check_class_targets(target, classes, first_row, &ignore_index_);
  }
};

// weight and ignore_index from a loss's JSON.
inline void read_class_weights(Args& a, ClassWeights* w) {
  w->weight_ = a.numbers("weight", {}, 0, 0.0, std::numeric_limits<double>::max());  // one per class: target_shape checks
  w->ignore_index_ = a.integer("ignore_index", -100, std::numeric_limits<int64_t>::min());
}

// As torch.nn.CrossEntropyLoss's arguments.
struct CrossEntropyAttrs : ClassWeights {
  double smoothing_ = 0;  // label_smoothing
};

// As torch.nn.NLLLoss's (its input: log-probabilities, as log_softmax gives).
struct NllAttrs : ClassWeights {};

}  // namespace dp
