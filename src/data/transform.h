// Per-sample transforms, applied as a loader reads samples, in this order:
//   {"random_crop": {"size": 32, "padding": 4}, "horizontal_flip": 0.5,
//    "normalize": {"mean": [0.4914, 0.4822, 0.4465], "std": [0.247, 0.243, 0.261]}}
// as torchvision's RandomCrop (zero padding), RandomHorizontalFlip and
// Normalize. The last two dims are (H, W); normalize's channels are dim 0.
// Random choices are a pure function of a key the loader derives from
// (seed, epoch, sample index), so a batch is the same whichever worker
// assembles it and after a seek.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/shape.h"

namespace dp {

class Transform {
 public:
  // Throws DP_ERR_JSON (not JSON) or DP_ERR_MODEL (a bad value, with its
  // JSON path: "/normalize/mean: expected a list of 3 numbers ...").
  // Returns nullptr for "{}" (nothing to do).
  static std::shared_ptr<const Transform> from_json(const std::string& text, const Shape& sample_shape);

  const Shape& input_shape() const { return in_; }
  const Shape& output_shape() const { return out_; }
  // Whether apply needs a separate source buffer (a crop changes the layout).
  bool needs_source() const { return crop_; }

  // src holds a sample of input_shape(); dst receives output_shape(). When
  // !needs_source(), src may equal dst (in place). No allocation.
  void apply(const float* src, float* dst, uint64_t key) const;

 private:
  Shape in_, out_;
  bool crop_ = false;
  int64_t crop_h_ = 0, crop_w_ = 0, pad_ = 0;
  double flip_p_ = 0;
  std::vector<float> mean_, std_;  // empty: no normalize
};

}  // namespace dp
