// The CPU engine: nn.DataParallel over CPU threads. Each device is a worker
// thread with its own replica (activations, gradients) and intra-op workers;
// all replicas read the model's own parameters and buffers.
//
// A training step: every replica runs forward, loss and backward on its
// rows; as each layer's gradients become final, the replicas join a bucket
// of the local communicator, whose last arrival sums the bucket over all
// replicas (in device order) into replica 0's gradients, helped by the
// replicas that already finished. So the sum overlaps backward, and when the
// last replica finishes, little is left to sum. Then reduce() adds the sum
// into the model's gradients and applies the optimizer range by range (each
// range still in cache), split over the device threads.
#include <cstring>

#include "engine/engine.h"
#include "engine/local_comm.h"

namespace dp {

namespace {

class CpuEngine;

// Runs the Layer objects, and reports each finished backward to the engine.
class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const Model& m, std::function<void(size_t)> done) : model_(m), done_(std::move(done)) {}
  void forward(size_t k, const RunCtx& ctx, LayerIO& io) override { model_.nodes[k].layer->forward(ctx, io); }
  void backward(size_t k, const RunCtx& ctx, LayerIO& io) override { model_.nodes[k].layer->backward(ctx, io); }
  void add(float* dst, const float* src, int64_t n) override {
    for (int64_t e = 0; e < n; ++e) dst[e] += src[e];
  }
  void zero(float* dst, int64_t n) override { std::memset(dst, 0, static_cast<size_t>(n) * sizeof(float)); }
  void backward_done(size_t node) override { done_(node); }

 private:
  const Model& model_;
  std::function<void(size_t)> done_;
};

class CpuDevice final : public ReplicaDevice {
 public:
  CpuDevice(const Model& model, int threads, std::function<void(size_t)> done)
      : model_(model), pool_(threads), exec_(model, std::move(done)), graph_(model, &exec_, nullptr) {}

  Replica& graph() override { return graph_; }
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
        comm_(devices, static_cast<int>(model.nodes.size()) + 1, &LocalComm::host_sum, Optimizer::kGrain) {
    set_bucket_mb(0.25);  // a bucket per large layer: their sums overlap the backward of the layers before
    set_threads_per_device(threads);
  }

  void set_threads_per_device(int threads) override {
    devices_.clear();
    for (int r = 0; r < n_; ++r)
      devices_.push_back(std::make_unique<CpuDevice>(model_, threads, [this, r](size_t node) { node_done(r, node); }));
  }

  void reduce(Optimizer* opt) override {
    const float* sum = devices_[0]->graph().grads();  // the buckets' destination
    float* grads = model_.mutable_grads().data();
    float* params = opt ? model_.mutable_params().data() : nullptr;
    if (opt) opt->begin_step();
    parallel_for(&threads_, model_.num_params(), Optimizer::kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) grads[i] += sum[i];
      if (opt) opt->update(params, grads, b, e);
    });
  }

  void zero_grad() override {
    std::vector<float>& g = model_.mutable_grads();
    std::fill(g.begin(), g.end(), 0.0f);
  }

  void optimizer_step(Optimizer& opt) override {
    opt.step(model_.mutable_params().data(), model_.grads().data(), model_.num_params(), &threads_);
  }

 protected:
  // Replicas read the model's arrays in place: fetch the newest ones first (a
  // GPU group may have trained this model last).
  void prepare(const RunPlan&) override {
    for (auto& d : devices_) d->graph().set_weights(model_.params().data(), model_.buffers().data());
  }
  bool bucketed() const override { return n_ > 1; }
  void reduce_bucket(int r, int64_t begin, int64_t count) override {
    const float* mine = r < active_ ? devices_[r]->graph().grads() + begin : nullptr;
    comm_.all_reduce(r, mine, devices_[0]->graph().grads() + begin, count);
  }
  void end_replica(int r, bool buckets) override {
    if (buckets) comm_.wait(r);
  }
  Communicator* comm() override { return &comm_; }

 private:
  LocalComm comm_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(Model& model, int devices, int threads_per_device) {
  return std::make_unique<CpuEngine>(model, devices, threads_per_device);
}

}  // namespace dp
