#include "data/batcher.h"

#include <algorithm>

#include "core/memory.h"
#include "data/loader.h"
#include "data/order.h"

namespace dp {

Batcher::Batcher(const Dataset& ds, const Transform* transform, const LoaderConfig& cfg)
    : ds_(ds), transform_(transform), cfg_(cfg), length_(ds.length()) {
  sample_shape_ = transform ? transform->output_shape() : ds.sample_shape();
  if (cfg.shuffle) {
    check_fits(0, 8 * static_cast<uint64_t>(length_), 0,
               "the loader's shuffled order of " + std::to_string(length_) + " samples (8 bytes each, per worker)");
    order_.resize(static_cast<size_t>(length_));
  }
  if (transform && transform->needs_source()) scratch_.resize(static_cast<size_t>(ds.sample_numel()));
}

int64_t Batcher::assemble(int64_t epoch, int64_t batch, Tensor& input, Tensor& target, const std::atomic<uint64_t>* gen,
                          uint64_t my_gen) {
  int64_t start = batch * cfg_.batch_size;
  const int64_t global_rows = std::min(cfg_.batch_size, length_ - start);
  int64_t rows = global_rows;
  if (cfg_.shard) {
    int64_t first = 0;
    cfg_.shard(global_rows, &first, &rows);
    start += first;
  }
  input.resize(DP_F32, Shape::batched(rows, sample_shape_));
  target.resize(ds_.target_dtype(), Shape::batched(rows, ds_.target_shape()));
  if (cfg_.shuffle && order_epoch_ != epoch) {
    epoch_order(cfg_.seed, epoch, order_);
    order_epoch_ = epoch;
  }
  const int64_t in_numel = sample_shape_.numel();
  const size_t target_bytes = static_cast<size_t>(ds_.target_numel()) * dtype_size(ds_.target_dtype());
  auto* in = input.f32();
  auto* tg = static_cast<char*>(target.data());
  for (int64_t r = 0; r < rows; ++r) {
    if (gen && gen->load(std::memory_order_relaxed) != my_gen) return -1;
    const int64_t index = cfg_.shuffle ? order_[static_cast<size_t>(start + r)] : start + r;
    float* row = in + r * in_numel;
    void* trow = tg + static_cast<size_t>(r) * target_bytes;
    if (!transform_) {
      ds_.get(index, row, trow);
    } else if (transform_->needs_source()) {
      ds_.get(index, scratch_.data(), trow);
      transform_->apply(scratch_.data(), row, transform_key(cfg_.seed, epoch, index));
    } else {
      ds_.get(index, row, trow);
      transform_->apply(row, row, transform_key(cfg_.seed, epoch, index));
    }
  }
  return global_rows;
}

}  // namespace dp
