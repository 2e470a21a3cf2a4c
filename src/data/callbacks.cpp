// A dataset of the caller's, through C callbacks. get_item reports failure by
// a non-zero return and a message; it becomes a dp::Error that the loader
// hands to the dp_loader_next call of that batch.
#include <cstring>

#include "core/error.h"
#include "data/dataset.h"

namespace dp {

namespace {

class CallbackDataset : public Dataset {
 public:
  CallbackDataset(const dp_dataset_callbacks& cb, const Shape& sample_shape, dp_dtype target_dtype,
                  const Shape& target_shape)
      : Dataset(sample_shape, target_dtype, target_shape), cb_(cb) {}
  // The last owner (the handle, or a loader still running) lets go.
  ~CallbackDataset() override {
    if (cb_.release) cb_.release(cb_.user);
  }

  int64_t length() const override { return cb_.length; }

  void get(int64_t index, float* input, void* target) const override {
    // On the stack: no allocation per sample; only a failure builds a string.
    char error[512];
    error[0] = '\0';
    int rc = cb_.get_item(cb_.user, index, input, target, error, sizeof error);
    if (rc != 0) {
      error[sizeof error - 1] = '\0';
      std::string msg = error[0] ? std::string(error) : "get_item returned " + std::to_string(rc) + " without a message";
      fail(DP_ERR_INVALID_ARGUMENT, "dataset callback failed at index " + std::to_string(index) + ": " + msg);
    }
  }

 private:
  dp_dataset_callbacks cb_;
};

}  // namespace

std::shared_ptr<Dataset> make_callback_dataset(const dp_dataset_callbacks& callbacks, const Shape& sample_shape,
                                               dp_dtype target_dtype, const Shape& target_shape) {
  return std::make_shared<CallbackDataset>(callbacks, sample_shape, target_dtype, target_shape);
}

}  // namespace dp
