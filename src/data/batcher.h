// Assembles one batch: the epoch's order, one dataset read per row, the
// transform. Each worker thread owns one, with its own copy of the epoch's
// order and a scratch sample, so workers share nothing while they work and
// allocate nothing after construction. (A worker recomputes the order when
// its batches cross into a new epoch: O(n) per epoch, against the O(n *
// sample size) of reading the samples.)
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "data/transform.h"
#include "tensor/tensor.h"

namespace dp {

struct LoaderConfig;

class Batcher {
 public:
  Batcher(const Dataset& ds, const Transform* transform, const LoaderConfig& cfg);

  // Batch `batch` of `epoch` into input [rows, ...sample] and target
  // [rows, ...target]; returns rows. Sharded (cfg.shard): only this
  // process's rows of the batch are read, and the batch's rows are returned. Returns -1 early when *gen stops being
  // my_gen (a seek or the loader's destruction); gen may be null. Throws the
  // dataset's errors.
  int64_t assemble(int64_t epoch, int64_t batch, Tensor& input, Tensor& target, const std::atomic<uint64_t>* gen,
                   uint64_t my_gen);

 private:
  const Dataset& ds_;
  const Transform* transform_;
  const LoaderConfig& cfg_;
  int64_t length_;
  Shape sample_shape_;
  std::vector<int64_t> order_;  // the shuffled order of order_epoch_
  int64_t order_epoch_ = -1;
  std::vector<float> scratch_;  // a raw sample, when the transform crops
};

}  // namespace dp
