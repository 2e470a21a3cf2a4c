#include "data/loader.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "engine/devices.h"
#include "data/batcher.h"

namespace dp {

Loader::Loader(std::shared_ptr<const Dataset> ds, std::shared_ptr<const Transform> transform, const LoaderConfig& cfg)
    : ds_(std::move(ds)), transform_(std::move(transform)), cfg_(cfg) {
  length_ = ds_->length();
  num_batches_ = batches_per_epoch(length_, cfg_.batch_size, cfg_.drop_last);
  sample_shape_ = transform_ ? transform_->output_shape() : ds_->sample_shape();
  target_shape_ = ds_->target_shape();

  // Every buffer is allocated here, at full batch size: later batches only
  // resize within it (and next() swaps buffers of the same capacity).
  int workers = cfg_.num_workers;
  size_t slots = workers == 0 ? 1 : static_cast<size_t>(workers) * static_cast<size_t>(cfg_.prefetch);
  int64_t rows = std::min(cfg_.batch_size, length_);
  slots_.resize(slots);
  for (auto& s : slots_) {
    if (cfg_.pin_memory) {
      s.input = Tensor(cuda_pinned_allocator());
      s.target = Tensor(cuda_pinned_allocator());
    }
    s.input.resize(DP_F32, Shape::batched(rows, sample_shape_));
    s.target.resize(ds_->target_dtype(), Shape::batched(rows, target_shape_));
  }
  for (int i = 0; i < std::max(workers, 1); ++i)
    batchers_.push_back(std::make_unique<Batcher>(*ds_, transform_.get(), cfg_));
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    gen_.fetch_add(1);
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

// The loader whose worker this thread is (set as it starts): no shared state
// to read while start_workers() is still adding threads.
static thread_local const Loader* t_worker_of = nullptr;

bool Loader::on_worker_thread() const { return t_worker_of == this; }

void Loader::start_workers() {
  // Started by the first next(), not by the constructor: a loader created and
  // then seeked (a checkpoint restored) assembles nothing it drops.
  for (int i = 0; i < cfg_.num_workers; ++i) threads_.emplace_back(&Loader::worker_main, this, i);
}

bool Loader::fill(Batcher& b, int64_t g, Slot& slot, uint64_t gen) {
  slot.error = DP_OK;
  try {
    int64_t rows = b.assemble(g / num_batches_, g % num_batches_, slot.input, slot.target,
                              cfg_.num_workers ? &gen_ : nullptr, gen);
    if (rows < 0) return false;
    slot.rows = rows;
  } catch (const Error& e) {
    slot.error = e.status();
    slot.message = e.what();
  } catch (const std::bad_alloc&) {
    slot.error = DP_ERR_OUT_OF_MEMORY;
    slot.message = "out of memory while assembling a batch";
  } catch (const std::exception& e) {
    slot.error = DP_ERR_INTERNAL;
    slot.message = e.what();
  }
  return true;
}

void Loader::worker_main(int id) {
  t_worker_of = this;
  Batcher& b = *batchers_[static_cast<size_t>(id)];
  const int64_t S = static_cast<int64_t>(slots_.size());
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    // Claim the next ticket once its slot's previous batch was taken (and a
    // dropped batch of an older generation has left it).
    work_cv_.wait(lk, [&] {
      return stop_ || (next_ticket_ < consumed_ + S && slots_[static_cast<size_t>(next_ticket_ % S)].state == Slot::kFree);
    });
    if (stop_) return;
    const int64_t t = next_ticket_++;
    Slot& slot = slots_[static_cast<size_t>(t % S)];
    slot.state = Slot::kFilling;
    slot.ticket = t;
    const uint64_t gen = gen_.load();
    const int64_t g = base_ + t;
    lk.unlock();
    bool done = fill(b, g, slot, gen);
    lk.lock();
    if (done && gen == gen_.load()) {
      slot.state = Slot::kReady;
      ready_cv_.notify_all();
    } else {
      slot.state = Slot::kFree;
      work_cv_.notify_all();
    }
  }
}

int64_t Loader::hand_over(Slot& slot, Tensor& input, Tensor& target) {
  // The position moves past a failed batch too; the error is thrown after
  // the slot is released, so the loader stays consistent.
  ++batch_;
  std::swap(input, slot.input);
  std::swap(target, slot.target);
  if (cfg_.pin_memory && slot.input.allocator() != input.allocator()) {
    // The caller's first tensors were not pinned: the slot gets pinned ones.
    slot.input = Tensor(input.allocator());
    slot.target = Tensor(input.allocator());
    slot.input.resize(DP_F32, input.shape());
    slot.target.resize(target.dtype(), target.shape());
  }
  return slot.rows;
}

int64_t Loader::next(Tensor& input, Tensor& target) {
  if (input.is_view() || target.is_view()) fail(DP_ERR_INVALID_ARGUMENT, "dp_loader_next: tensor views cannot receive batches");
  started_ = true;
  if (batch_ >= num_batches_) {
    // The end of the epoch (every epoch, when there are no batches at all).
    input.resize(DP_F32, Shape::batched(0, sample_shape_));
    target.resize(ds_->target_dtype(), Shape::batched(0, target_shape_));
    ++epoch_;
    batch_ = 0;
    return 0;
  }
  const int64_t g = epoch_ * num_batches_ + batch_;

  if (cfg_.num_workers == 0) {
    Slot& slot = slots_[0];
    fill(*batchers_[0], g, slot, 0);
    if (slot.error != DP_OK) {
      ++batch_;
      fail(slot.error, slot.message);
    }
    return hand_over(slot, input, target);
  }

  if (threads_.empty()) start_workers();
  const int64_t S = static_cast<int64_t>(slots_.size());
  std::unique_lock<std::mutex> lk(mu_);
  const int64_t t = g - base_;  // == consumed_
  Slot& slot = slots_[static_cast<size_t>(t % S)];
  ready_cv_.wait(lk, [&] { return slot.state == Slot::kReady && slot.ticket == t; });
  // A ready slot is the consumer's alone until it marks it free again.
  lk.unlock();
  dp_status error = slot.error;
  std::string message;
  int64_t rows = 0;
  if (error != DP_OK) {
    ++batch_;
    message = std::move(slot.message);
  } else {
    rows = hand_over(slot, input, target);
  }
  lk.lock();
  slot.state = Slot::kFree;
  ++consumed_;
  lk.unlock();
  work_cv_.notify_all();
  if (error != DP_OK) fail(error, message);
  return rows;
}

void Loader::shard(std::function<void(int64_t, int64_t*, int64_t*)> fn) {
  if (started_)
    fail(DP_ERR_INVALID_ARGUMENT, "dp_loader_shard: shard a loader before its first batch (a restored position is fine: "
                                  "shard, then dp_checkpoint_load or dp_loader_seek)");
  cfg_.shard = std::move(fn);
}

bool Loader::order_batches(const std::string& order, int64_t* batches) {
  const nlohmann::json o = nlohmann::json::parse(order, nullptr, false);
  auto integer = [&o](const char* k, int64_t min) {
    return o.contains(k) && o[k].is_number_integer() && o[k].get<int64_t>() >= min;
  };
  auto boolean = [&o](const char* k) { return o.contains(k) && o[k].is_boolean(); };
  if (!o.is_object() || o.size() != 5 || !integer("batch_size", 1) || !integer("samples", 0) || !boolean("shuffle") ||
      !o.contains("seed") || !o["seed"].is_number_integer() || !boolean("drop_last"))
    return false;
  *batches = batches_per_epoch(o["samples"].get<int64_t>(), o["batch_size"].get<int64_t>(), o["drop_last"].get<bool>());
  return true;
}

std::string Loader::order() const {
  return "{\"batch_size\": " + std::to_string(cfg_.batch_size) + ", \"shuffle\": " + (cfg_.shuffle ? "true" : "false") +
         ", \"seed\": " + std::to_string(cfg_.seed) + ", \"drop_last\": " + (cfg_.drop_last ? "true" : "false") +
         ", \"samples\": " + std::to_string(length_) + "}";
}

void Loader::seek(int64_t epoch, int64_t batch) {
  // Global batch numbers (epoch * K + batch) must fit in int64.
  const int64_t max_epoch = INT64_MAX / std::max<int64_t>(num_batches_, 1) - 2;
  if (epoch < 0 || epoch > max_epoch || batch < 0 || batch > num_batches_)
    fail(DP_ERR_INVALID_ARGUMENT,
         "position (" + std::to_string(epoch) + ", " + std::to_string(batch) + ") is outside the loader's: " +
             (epoch < 0 || epoch > max_epoch ? "the epoch must be in [0, " + std::to_string(max_epoch) + "]"
                                             : "the batch must be in [0, " + std::to_string(num_batches_) + "] (" +
                                                   std::to_string(num_batches_) + " batches an epoch)"));
  if (cfg_.num_workers > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    gen_.fetch_add(1);
    for (auto& s : slots_)
      if (s.state == Slot::kReady) s.state = Slot::kFree;
    base_ = epoch * num_batches_ + batch;
    next_ticket_ = 0;
    consumed_ = 0;
  }
  work_cv_.notify_all();
  epoch_ = epoch;
  batch_ = batch;
}

}  // namespace dp
