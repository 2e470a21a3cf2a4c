// A loader: batches of a dataset, in an epoch order that is a pure function
// of (seed, epoch), assembled ahead of time by worker threads.
//
// Pipeline: the batches from a start position are numbered by tickets 0, 1,
// 2, ...; ticket t is the global batch g0 + t, i.e. batch (g0 + t) % K of
// epoch (g0 + t) / K (K batches per epoch). Workers claim tickets in order
// and assemble ticket t into slot t % S of a ring of S = num_workers *
// prefetch preallocated batches (prefetch per worker, as PyTorch's
// prefetch_factor); next() takes the slots in ticket order, so batches come
// out in order however the workers interleave. A worker may claim ticket t
// only once ticket t - S has been taken, which bounds the memory. With
// num_workers = 0, next() assembles the batch itself, in one slot.
//
// The epoch's end is not a ticket: next() returns 0 rows once per epoch
// (after batch K - 1) and moves to the next epoch, while the workers run on
// into it. seek() bumps a generation counter: batches of the old generation
// are dropped (a worker still assembling one stops at its next sample) and
// the tickets restart at the new position.
//
// A batch that fails (a callback's error) is delivered as that error by the
// next() that would have returned it; the position moves past it, as
// PyTorch's iterator does, and the following next() continues.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/transform.h"
#include "tensor/tensor.h"

namespace dp {

struct LoaderConfig {
  int64_t batch_size = 1;  // PyTorch's defaults throughout
  bool shuffle = false;
  bool drop_last = false;
  int num_workers = 0;
  int prefetch = 2;
  uint64_t seed = 0;
  bool pin_memory = false;  // batches in page-locked memory, for GPU groups
  // A distributed sampler: of a global batch of `rows` rows, this process
  // reads only rows [*first, *first + *count) (its devices' share: see
  // Loader::shard). Null: every row.
  std::function<void(int64_t rows, int64_t* first, int64_t* count)> shard;
  // Throws DP_ERR_JSON, or DP_ERR_MODEL naming the key ("/batch_size: ...").
  static LoaderConfig from_json(const std::string& text);
};

class Batcher;

class Loader {
 public:
  // transform may be null. The loader shares ownership of both.
  Loader(std::shared_ptr<const Dataset> ds, std::shared_ptr<const Transform> transform, const LoaderConfig& cfg);
  // Stops the workers (a batch in progress stops at its next sample) and joins them.
  ~Loader();
  // Whether the calling thread is one of this loader's workers (inside a
  // dataset callback): it cannot destroy the loader, whose destructor joins it.
  bool on_worker_thread() const;
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t num_batches() const { return num_batches_; }
  // Batches an epoch of `samples` makes, as PyTorch's DataLoader: floor(n / B)
  // with drop_last, else ceil(n / B), the last one short.
  static int64_t batches_per_epoch(int64_t samples, int64_t batch_size, bool drop_last) {
    return samples / batch_size + (!drop_last && samples % batch_size > 0 ? 1 : 0);  // no overflow
  }
  // The batches an epoch of the loader whose order() wrote `order` makes;
  // false when the text is not exactly such a record (its keys and types).
  static bool order_batches(const std::string& order, int64_t* batches);
  // The next batch, swapped into input and target (resized to [rows, ...];
  // sharded: to this process's rows of it, and the global batch's rows are
  // returned), or 0 rows at the end of an epoch (the tensors are then resized to 0
  // rows). The caller's previous buffers become the loader's, so once every
  // buffer is large enough nothing allocates. Throws the batch's error.
  int64_t next(Tensor& input, Tensor& target);
  // The epoch and the index of the batch the next call returns (K at the
  // end of an epoch, where next() returns 0 rows).
  int64_t epoch() const { return epoch_; }
  int64_t batch() const { return batch_; }
  // Continues from (epoch, batch), 0 <= batch <= K.
  void seek(int64_t epoch, int64_t batch);
  // From now on, reads only this process's share of each global batch (the
  // rows `fn` says, possibly none), while next() still returns the global
  // batch's rows, so that every process's loop ends together. Only before
  // the first next(); throws DP_ERR_INVALID_ARGUMENT after it.
  void shard(std::function<void(int64_t rows, int64_t* first, int64_t* count)> fn);

  const Shape& sample_shape() const { return sample_shape_; }
  const Shape& target_shape() const { return target_shape_; }
  int64_t dataset_length() const { return length_; }
  const LoaderConfig& config() const { return cfg_; }
  // What fixes the samples of a position (epoch, batch), as a JSON object's text:
  // {"batch_size": 64, "shuffle": true, "seed": 0, "drop_last": false, "samples": 60000}.
  std::string order() const;

 private:
  struct Slot {
    enum State { kFree, kFilling, kReady };
    State state = kFree;
    int64_t ticket = -1;
    int64_t rows = 0;
    Tensor input, target;
    dp_status error = DP_OK;
    std::string message;
  };

  void start_workers();
  void worker_main(int id);
  // Assembles global batch g into slot with batcher b: false if cancelled.
  bool fill(Batcher& b, int64_t g, Slot& slot, uint64_t gen);
  int64_t hand_over(Slot& slot, Tensor& input, Tensor& target);

  std::shared_ptr<const Dataset> ds_;
  std::shared_ptr<const Transform> transform_;
  LoaderConfig cfg_;
  int64_t length_ = 0;
  int64_t num_batches_ = 0;
  Shape sample_shape_;  // after the transform
  Shape target_shape_;

  // The consumer's position.
  int64_t epoch_ = 0;
  int64_t batch_ = 0;
  bool started_ = false;  // next() was called: too late to shard

  std::vector<std::unique_ptr<Batcher>> batchers_;  // one per worker (or one for next())
  std::vector<Slot> slots_;

  // Pipeline state, guarded by mu_. gen_ is also read without the lock by
  // workers, between samples, to stop a batch that is no longer wanted.
  std::mutex mu_;
  std::condition_variable work_cv_;   // a slot was freed, or stop/seek
  std::condition_variable ready_cv_;  // a slot became ready
  std::atomic<uint64_t> gen_{0};
  bool stop_ = false;
  int64_t base_ = 0;  // the global batch of ticket 0
  int64_t next_ticket_ = 0;
  int64_t consumed_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace dp
