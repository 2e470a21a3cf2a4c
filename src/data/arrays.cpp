// Samples from the caller's memory: copied (the caller may free or reuse its
// arrays at once) or borrowed (no copy of a large array; the caller keeps it
// alive and unchanged, and sees its later writes through the dataset).
#include <cstring>

#include "core/error.h"
#include "core/memory.h"
#include "data/dataset.h"
#include "tensor/tensor.h"

namespace dp {

namespace {

class ArrayDataset : public Dataset {
 public:
  ArrayDataset(const float* inputs, const Shape& sample_shape, int64_t count, dp_dtype target_dtype, const void* targets,
               const Shape& target_shape, bool borrow)
      : Dataset(sample_shape, target_dtype, target_shape), count_(count) {
    size_t input_floats = static_cast<size_t>(count) * static_cast<size_t>(sample_numel());
    target_bytes_ = static_cast<size_t>(target_numel()) * dtype_size(target_dtype);
    if (!borrow) {  // the copy, checked before it is taken (count * size fits int64: the C entry checked)
      const int64_t bytes = checked_add(checked_mul(count, checked_mul(sample_numel(), 4, "sample bytes"), "inputs"),
                                        checked_mul(count, static_cast<int64_t>(target_bytes_), "targets"), "dataset");
      check_fits(0, static_cast<uint64_t>(bytes), 0,
                 "dp_dataset_from_arrays: a copy of " + std::to_string(count) + " samples of " + sample_shape.str() +
                     " (borrow = 1 copies nothing)");
    }
    if (borrow) {
      inputs_ = inputs;
      targets_ = static_cast<const char*>(targets);
    } else {
      own_inputs_.assign(inputs, inputs + input_floats);
      own_targets_.assign(static_cast<const char*>(targets), static_cast<const char*>(targets) + count * target_bytes_);
      inputs_ = own_inputs_.data();
      targets_ = own_targets_.data();
    }
  }

  int64_t length() const override { return count_; }

  void get(int64_t index, float* input, void* target) const override {
    int64_t n = sample_numel();
    std::memcpy(input, inputs_ + index * n, static_cast<size_t>(n) * sizeof(float));
    std::memcpy(target, targets_ + static_cast<size_t>(index) * target_bytes_, target_bytes_);
  }

 private:
  int64_t count_;
  size_t target_bytes_;
  const float* inputs_ = nullptr;
  const char* targets_ = nullptr;
  std::vector<float> own_inputs_;
  std::vector<char> own_targets_;
};

}  // namespace

std::shared_ptr<Dataset> make_array_dataset(const float* inputs, const Shape& sample_shape, int64_t count,
                                            dp_dtype target_dtype, const void* targets, const Shape& target_shape,
                                            bool borrow) {
  return std::make_shared<ArrayDataset>(inputs, sample_shape, count, target_dtype, targets, target_shape, borrow);
}

}  // namespace dp
