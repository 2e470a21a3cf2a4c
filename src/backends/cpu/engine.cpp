// The CPU engine: nn.DataParallel over CPU threads. Each device is a worker
// thread with its own replica (activations, gradients) and intra-op workers;
// all replicas read the model's own parameters and buffers.
//
// A training step: every replica runs forward, loss and backward on its
// rows; as each layer's gradients become final, the replicas join a bucket
// of the local communicator, which sums the bucket over all replicas (in
// device order) into the model's gradients, where replica 0 wrote its own,
// and applies the optimizer to each range it summed while the range is
// still in cache. The replicas that have finished their backward do that
// work (one replica does it at once, on all its threads), so the replica
// behind is not delayed by it; with processes, a bucket's last arrival
// starts it at once.
// Neither happens unless the batch's loss is finite: every replica computed
// its loss before it joined the first bucket, so the first range summed
// decides for all. (dp_group_backward sums into replica 0's own gradients
// instead, and reduce() adds them to the model's.)
//
// A step in which some replica runs more rows than ever before allocates
// (activations grow), and an allocation may fail midway: then the update
// waits until every replica is done (RunPlan::grows), and a failure leaves
// parameters and optimizer state as they were. Later steps allocate nothing.
//
// With processes (a process group), the replicas' sum of each bucket is not
// the end: a stage thread takes the buckets in order, as each one's local
// sum completes, sums it over the processes (the process communicator, in
// place), and only then applies the optimizer to it. In a training step it
// first gathers every process's losses and statistics, as soon as this
// process's replicas have their losses (while they run backward), so the
// gate decides on the whole batch's loss, the same on every process.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "engine/local_comm.h"

namespace dp {

namespace {

class CpuEngine;

// The most buckets a step may have (Engine::set_bucket_mb cuts them at nodes
// and at layers' grad_splits): the collectives a replica starts per job.
int max_buckets(const Model& model) {
  size_t n = model.nodes.size() + 1;
  for (const Node& node : model.nodes) n += node.layer->grad_splits().size();
  return static_cast<int>(n);
}

// Runs the Layer objects, and reports each finished backward to the engine.
class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const Model& m, std::function<void(size_t, int64_t)> final, const bool* partial)
      : model_(m), final_(std::move(final)), partial_(partial) {}
  void forward(size_t k, const RunCtx& ctx, LayerIO& io) override { model_.nodes[k].layer->forward(ctx, io); }
  void backward(size_t k, const RunCtx& ctx, LayerIO& io) override { model_.nodes[k].layer->backward(ctx, io); }
  void add(float* dst, const float* src, int64_t n) override {
    for (int64_t e = 0; e < n; ++e) dst[e] += src[e];
  }
  void zero(float* dst, int64_t n) override { std::memset(dst, 0, static_cast<size_t>(n) * sizeof(float)); }
  bool zero_grads_by_layer() const override { return true; }
  void backward_done(size_t node) override { final_(node, 0); }
  bool wants_partial() const override { return *partial_; }
  void backward_final(size_t node, int64_t from) override { final_(node, from); }

 private:
  const Model& model_;
  std::function<void(size_t, int64_t)> final_;  // Engine::node_final of this replica
  const bool* partial_;                          // the engine's split_layers_
};

class CpuDevice final : public ReplicaDevice {
 public:
  CpuDevice(const Model& model, int threads, std::function<void(size_t, int64_t)> final, const bool* partial)
      : model_(model), pool_(threads), exec_(model, std::move(final), partial), graph_(model, &exec_, nullptr) {}

  Replica& graph() override { return graph_; }
  Workers& pool() { return pool_; }
  void begin(RunCtx& ctx) override { ctx.pool = &pool_; }
  const Tensor& load(Rows which, const Tensor& host, int64_t off, int64_t rows) override {
    return rows_[which] = host.rows(off, rows);  // a view: no copy
  }
  void store_output(Tensor& host, int64_t off) override {
    const Tensor& out = graph_.output();
    std::memcpy(host.f32() + off * out.shape().inner(), out.f32(), out.bytes());
  }
  void loss(const RunCtx& ctx, const Tensor& target, bool count_correct) override {
    const Tensor& out = graph_.output();
    loss_ = model_.loss->forward_backward(ctx, out, target, &graph_.loss_grad());
    if (!count_correct) return;
    correct_ = 0;
    if (target.dtype() != DP_I64 || out.shape().ndim != 2) return;
    const int64_t rows = out.shape()[0], classes = out.shape()[1];
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = out.f32() + r * classes;
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (x[c] > x[best]) best = c;
      correct_ += best == target.i64()[r];
    }
  }
  void keep_stats() override {}  // already in host memory
  double loss_value() override { return loss_; }
  int64_t correct_value() override { return correct_; }
  const float* stats() override { return graph_.all_stats(); }

 private:
  const Model& model_;
  Workers pool_;  // intra-op
  CpuExecutor exec_;
  Replica graph_;
  Tensor rows_[3];
  double loss_ = 0;
  int64_t correct_ = 0;
};

class CpuEngine final : public Engine {
 public:
  CpuEngine(Model& model, int devices, int threads)
      : Engine(model, devices),
        comm_(devices, max_buckets(model),
              [this](float* out, const float* const* in, int k, int64_t b, int64_t e) { sum_then_step(out, in, k, b, e); },
              Optimizer::kGrain, [this](float* out, int64_t) { bucket_summed(out); }) {
    // A bucket per large layer: their sums overlap the backward of the layers
    // before. Buckets inside a layer (Layer::grad_splits) only across
    // processes, or with DP_SPLIT_LAYERS=1: between threads they measured
    // no faster (bench/RESULTS.md, 2026-12-02).
    split_layers_ = split_env() == 1;
    set_bucket_mb(0.25, split_layers_);
    set_threads_per_device(threads);
    // Between threads, a bucket is summed (and stepped) by the replicas that
    // have finished their backward, not by the last one to join it: that
    // one is the replica behind, and the work would delay it further, while
    // no core is idle for an overlap to use. With one replica, at once
    // (the gradients are in cache); with processes too (set_processes).
    // 2 devices, dp bench, paired runs: MLP 784-512-256-10 +7% (88-91k ->
    // 94-96k samples/s), the CNN +3-15% in 3 of 4, MLP 784-256-10 level
    // (bench/RESULTS.md, 2026-12-07).
    comm_.set_eager(devices == 1);
  }

  ~CpuEngine() override {
    if (!stage_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(stage_mu_);
      stop_ = true;
    }
    stage_cv_.notify_all();
    stage_.join();
  }

  void set_processes(Communicator* procs, int rank, int first, int global) override {
    Engine::set_processes(procs, rank, first, global);
    // Buckets inside large layers (DP_SPLIT_LAYERS=0: not): a large first
    // layer's all-reduce starts while the rest of it is computed. Buckets of
    // 0.25 MiB, as between threads: with 1 MiB the Fashion-MNIST MLP's
    // gradient (0.9 MiB) was one bucket, all-reduced only after backward;
    // with 0.25 MiB two of its three overlap the first layer's backward (2
    // processes against 2 threads: 0.85x -> 0.91x, and 0.68x -> 0.81x with a
    // faster sgemm; bench/RESULTS.md, run 5).
    split_layers_ = split_env() != 0;
    set_bucket_mb(0.25, split_layers_);
    comm_.set_eager(true);  // each bucket's sum over processes starts as soon as its local sum is done
    ready_.assign(buckets_.size(), 0);
    stage_ = std::thread(&CpuEngine::stage_main, this);
  }

  void set_threads_per_device(int threads) override {
    solo_pool_ = nullptr;  // it lives in devices_[0]
    devices_.clear();
    for (int r = 0; r < n_; ++r)
      devices_.push_back(std::make_unique<CpuDevice>(
          model_, threads, [this, r](size_t node, int64_t from) { node_final(r, node, from); }, &split_layers_));
    // One replica with several threads: its intra-op threads also run the
    // update and the host sums, each bucket's range in one piece per thread.
    // On its own thread the update left the others idle long enough to fall
    // asleep, and the next product woke them. 1 device x 2 threads, dp bench
    // of the 784-512-256-10 MLP, 6 pairs: +2 to +11% (bench/RESULTS.md,
    // 2026-12-07).
    solo_pool_ = n_ == 1 && threads > 1 ? &static_cast<CpuDevice&>(*devices_[0]).pool() : nullptr;
    comm_.set_chunk(solo_pool_ ? Optimizer::kGrain * threads : Optimizer::kGrain);
  }

  void comm_seconds(double* busy, double* exposed) const override {
    std::lock_guard<std::mutex> lock(stage_mu_);
    *busy = busy_s_;
    *exposed = exposed_s_;
  }

  void reduce(Optimizer* opt) override {
    if (opt_) {  // after kTrain: the buckets summed into the model's gradients and stepped as they went
      if (gate_ == kUndecided) decide();  // no bucket (a model without parameters): the step still counts
      opt_ = nullptr;
      return;
    }
    (void)opt;  // after kBackward: add the sum the buckets left in replica 0
    const float* sum = devices_[0]->graph().grads();
    float* grads = model_.mutable_grads().data();
    parallel_for(host_pool(), model_.num_params(), Optimizer::kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) grads[i] += sum[i];
    });
  }

  void zero_grad() override {
    std::vector<float>& g = model_.mutable_grads();
    std::fill(g.begin(), g.end(), 0.0f);
    model_.has_grads = false;
  }

  void optimizer_step(Optimizer& opt) override {
    if (!opt.step(model_.mutable_params().data(), model_.mutable_grads().data(), model_.num_params(), host_pool()))
      opt.check_held();
  }

 protected:
  // Replicas read the model's arrays in place: fetch the newest ones first (a
  // GPU group may have trained this model last). A training step's buckets
  // go straight into the model's gradients, and step its parameters.
  void prepare(const RunPlan& plan) override {
    opt_ = plan.job == Job::kTrain ? plan.opt : nullptr;
    defer_ = plan.grows || (opt_ && opt_->defers());  // clipping and the grad scaler need every gradient first
    gate_ = kUndecided;
    dst_ = opt_ ? model_.mutable_grads().data() : nullptr;
    params_ = opt_ ? model_.mutable_params().data() : nullptr;
    for (auto& d : devices_) d->graph().set_weights(model_.params().data(), model_.buffers().data());
    // Replica 0 writes its gradients where the sum goes, and the others' are
    // added to it in place (in a training step, the model's own).
    devices_[0]->graph().set_grads(dst_);
    if (!opt_) dst_ = devices_[0]->graph().grads();
    if (procs_ && (plan.job == Job::kTrain || plan.job == Job::kBackward) && !buckets_.empty()) {
      std::lock_guard<std::mutex> lock(stage_mu_);
      std::fill(ready_.begin(), ready_.end(), 0);
      losses_ = 0;
      cancel_ = false;
      stage_error_ = nullptr;
      ++stage_started_;
      stage_cv_.notify_all();
    }
  }
  // A step whose loss is not finite leaves the gradients zero, as a GPU
  // group does (the buckets wrote sums the optimizer never used).
  void finish(const RunPlan& plan) override {
    if (procs_) {
      std::unique_lock<std::mutex> lock(stage_mu_);
      waiting_since_ = std::chrono::steady_clock::now();
      waiting_ = true;
      computed_while_waiting_ = 0;
      stage_cv_.wait(lock, [&] { return stage_done_ == stage_started_; });
      waiting_ = false;
      // The wait, less the stage's optimizer updates in it: what communication left exposed.
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting_since_).count();
      exposed_s_ += std::max(0.0, waited - computed_while_waiting_);
      if (stage_error_) std::rethrow_exception(stage_error_);
      lock.unlock();
      if (plan.job != Job::kBackward && !gathered_) gather_results();
    }
    // Every replica is done: unscale and clip (an inf/NaN gradient with the
    // grad scaler, or a non-finite gradient norm, holds the step, as a
    // non-finite loss does), then the whole update.
    if (opt_ && defer_ && gate_ == kUndecided && may_step() &&
        !opt_->prepare(dst_, model_.num_params(), host_pool()))
      gate_ = kHold;
    if (opt_ && defer_ && decide())
      parallel_for(host_pool(), model_.num_params(), Optimizer::kGrain,
                   [&](int64_t b, int64_t e) { opt_->update(params_, dst_, b, e); });
    if (opt_ && gate_ == kHold) zero_grad();
  }
  // After a failure (the process communicator is aborted by then, so the
  // stage's collective in flight fails at once).
  // A failed training step leaves the gradients zero, as a non-finite loss
  // does (the buckets may have written partial sums).
  void abandon() override {
    if (procs_) {
      std::unique_lock<std::mutex> lock(stage_mu_);
      cancel_ = true;
      stage_cv_.notify_all();
      stage_cv_.wait(lock, [&] { return stage_done_ == stage_started_; });
    }
    if (opt_) zero_grad();
    opt_ = nullptr;
  }
  void loss_done(int) override {
    if (!procs_ || !opt_) return;
    std::lock_guard<std::mutex> lock(stage_mu_);
    if (++losses_ == n_) stage_cv_.notify_all();
  }
  bool bucketed() const override { return true; }
  void reduce_bucket(int r, int64_t begin, int64_t count) override {
    const float* mine = r < active_ ? devices_[r]->graph().grads() + begin : nullptr;
    comm_.all_reduce(r, mine, dst_ + begin, count);
  }
  void end_replica(int r, bool buckets) override {
    if (buckets) comm_.wait(r);
  }
  Communicator* comm() override { return &comm_; }

 private:
  enum Gate { kUndecided, kStep, kHold };

  // The local communicator's sum; in a training step, then the optimizer on
  // the same range while it is in cache, once the loss is known to be finite
  // (every replica computed its loss before it joined the first bucket).
  void sum_then_step(float* out, const float* const* in, int k, int64_t b, int64_t e) {
    LocalComm::host_sum(out, in, k, b, e);
    if (procs_ || !opt_ || defer_ || !decide()) return;  // with processes, the stage steps (bucket_summed)
    const int64_t at = out - dst_ + b;  // where the range starts in the model's arrays
    parallel_for(solo_pool_, e - b, Optimizer::kGrain,
                 [&](int64_t lo, int64_t hi) { opt_->update(params_, dst_, at + lo, at + hi); });
  }
  // A bucket's sum over the replicas is complete: with processes, it goes
  // on to the stage.
  void bucket_summed(float* out) {
    if (!procs_) return;
    const int j = bucket_at(out - dst_);
    std::lock_guard<std::mutex> lock(stage_mu_);
    ready_[static_cast<size_t>(j)] = 1;
    stage_cv_.notify_all();
  }
  // Whether this step may update: decided once, by whoever gets here first.
  bool decide() {
    int g = gate_.load(std::memory_order_acquire);
    if (g == kUndecided) {
      std::lock_guard<std::mutex> lock(gate_mu_);
      g = gate_.load(std::memory_order_relaxed);
      if (g == kUndecided) {
        g = may_step() ? kStep : kHold;
        if (g == kStep) opt_->start_step();
        gate_.store(g, std::memory_order_release);
      }
    }
    return g == kStep;
  }

  // The stage of processes: one job at a time.
  void stage_main() {
    std::unique_lock<std::mutex> lock(stage_mu_);
    for (;;) {
      stage_cv_.wait(lock, [&] { return stop_ || stage_done_ < stage_started_; });
      if (stop_) return;
      try {
        stage_job(lock);
      } catch (...) {
        if (!lock.owns_lock()) lock.lock();
        stage_error_ = std::current_exception();
      }
      ++stage_done_;
      stage_cv_.notify_all();
    }
  }
  // One job, holding `lock` except while it communicates: in a training
  // step the gate first (once every replica has its loss), then the buckets
  // in order, each once its sum over the replicas is done.
  void stage_job(std::unique_lock<std::mutex>& lock) {
    using Clock = std::chrono::steady_clock;
    auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    if (opt_) {  // kBackward has no optimizer, and no gate
      stage_cv_.wait(lock, [&] { return cancel_ || losses_ == n_; });
      if (cancel_) return;
      lock.unlock();
      const auto t0 = Clock::now();
      gather_results();  // a collective: the processes' losses and statistics
      const auto t1 = Clock::now();
      if (!defer_) decide();
      const auto t2 = Clock::now();
      lock.lock();
      busy_s_ += seconds(t0, t1);
      if (waiting_ && t2 > waiting_since_) computed_while_waiting_ += seconds(std::max(t1, waiting_since_), t2);
    }
    for (size_t j = 0; j < buckets_.size(); ++j) {
      stage_cv_.wait(lock, [&] { return cancel_ || ready_[j]; });
      if (cancel_) return;
      lock.unlock();
      const Bucket& bk = buckets_[j];
      const auto t0 = Clock::now();
      // Keyed by bucket, apart for a step's and a backward's arrays.
      const int key = static_cast<int>(j + (opt_ ? 0 : buckets_.size()));
      procs_->all_reduce_bucket(rank_, key, dst_ + bk.begin, bk.count);
      const auto t1 = Clock::now();
      if (opt_ && !defer_ && decide()) opt_->update(params_, dst_, bk.begin, bk.begin + bk.count);
      const auto t2 = Clock::now();
      lock.lock();
      busy_s_ += seconds(t0, t1);
      if (waiting_ && t2 > waiting_since_) computed_while_waiting_ += seconds(std::max(t1, waiting_since_), t2);
    }
  }

  // Where host work outside the replicas runs: a thread per replica, or a
  // single replica's intra-op threads.
  Workers* host_pool() { return solo_pool_ ? solo_pool_ : &threads_; }

  // DP_SPLIT_LAYERS: 0 or 1, or -1 when unset.
  static int split_env() {
    const char* env = std::getenv("DP_SPLIT_LAYERS");
    return env && *env ? std::atoi(env) != 0 : -1;
  }
  bool split_layers_ = false;  // buckets may end inside large layers
  LocalComm comm_;
  Workers* solo_pool_ = nullptr;  // a single replica's threads, when it has several
  // The stage of processes (only with set_processes), guarded by stage_mu_.
  std::thread stage_;
  mutable std::mutex stage_mu_;
  std::condition_variable stage_cv_;
  std::vector<char> ready_;                      // per bucket: its sum over the replicas is done
  uint64_t stage_started_ = 0, stage_done_ = 0;  // jobs
  int losses_ = 0;  // replicas whose loss is known, in this training step
  bool cancel_ = false, stop_ = false;
  std::exception_ptr stage_error_;
  double busy_s_ = 0, exposed_s_ = 0;  // comm_seconds(): time in collectives, and finish()'s wait for them
  // While finish() waits for the stage: since when, and the stage's computing (optimizer updates) in that time.
  bool waiting_ = false;
  std::chrono::steady_clock::time_point waiting_since_;
  double computed_while_waiting_ = 0;
  Optimizer* opt_ = nullptr;  // the training step's, from prepare() to reduce()
  bool defer_ = false;        // RunPlan::grows, clipping, the grad scaler: the update waits for finish()
  float* dst_ = nullptr;      // where the buckets' sums go
  float* params_ = nullptr;
  std::atomic<int> gate_{kUndecided};
  std::mutex gate_mu_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(Model& model, int devices, int threads_per_device) {
  return std::make_unique<CpuEngine>(model, devices, threads_per_device);
}

}  // namespace dp
