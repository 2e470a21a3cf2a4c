// A dataset: `length()` samples, each a float32 input of a fixed shape and a
// target (an int64 class index of shape [], or float32 of a fixed shape).
// Loaders call get() from several worker threads at once, so every
// implementation must be safe to read concurrently; the ones here are
// immutable after construction.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dp.h"
#include "tensor/shape.h"

namespace dp {

class Dataset {
 public:
  Dataset(Shape sample_shape, dp_dtype target_dtype, Shape target_shape)
      : sample_shape_(sample_shape), target_dtype_(target_dtype), target_shape_(target_shape) {}
  virtual ~Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  virtual int64_t length() const = 0;
  // Writes sample `index` (0 <= index < length()): sample_numel() floats to
  // input, and one int64 or target_numel() floats to target. Thread-safe.
  // Throws dp::Error on failure (a caller's callback that fails, say).
  virtual void get(int64_t index, float* input, void* target) const = 0;

  const Shape& sample_shape() const { return sample_shape_; }
  dp_dtype target_dtype() const { return target_dtype_; }
  const Shape& target_shape() const { return target_shape_; }
  int64_t sample_numel() const { return sample_shape_.numel(); }
  int64_t target_numel() const { return target_shape_.numel(); }

 private:
  Shape sample_shape_;
  dp_dtype target_dtype_;
  Shape target_shape_;
};

// The datasets dp ships; each throws dp::Error (DP_ERR_IO for files, naming
// the file and the byte offset of what is wrong).
std::shared_ptr<Dataset> load_idx(const std::string& images_path, const std::string& labels_path);
std::shared_ptr<Dataset> load_cifar10(const std::vector<std::string>& paths);
// count samples from memory; with borrow the arrays are read in place (and
// must outlive the dataset), otherwise copied.
std::shared_ptr<Dataset> make_array_dataset(const float* inputs, const Shape& sample_shape, int64_t count,
                                            dp_dtype target_dtype, const void* targets, const Shape& target_shape,
                                            bool borrow);
std::shared_ptr<Dataset> make_callback_dataset(const dp_dataset_callbacks& callbacks, const Shape& sample_shape,
                                               dp_dtype target_dtype, const Shape& target_shape);

}  // namespace dp
