// One replica on a GPU: its stream and handles, the graph walk of
// engine/replica.h with every layer run by its CUDA op, device copies of its
// rows of the batch, the loss, and the read-back of its results. The job it
// takes part in is Engine::run_replica's.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/ops/ops.h"
#include "backends/cuda/pinned.h"
#include "engine/engine.h"

namespace dp {

class CudaExecutor final : public Executor {
 public:
  // Throws DP_ERR_DEVICE naming the first layer without a CUDA implementation.
  CudaExecutor(const Model& model, CudaCtx* ctx);
  void forward(size_t node, const RunCtx& ctx, LayerIO& io) override { ops_[node]->forward(ctx, io); }
  void backward(size_t node, const RunCtx& ctx, LayerIO& io) override { ops_[node]->backward(ctx, io); }
  void add(float* dst, const float* src, int64_t n) override;
  void zero(float* dst, int64_t n) override;
  void backward_done(size_t node) override {
    if (on_backward_done) on_backward_done(node);
  }
  // Called as each layer's gradients become final: starts gradient buckets.
  std::function<void(size_t)> on_backward_done;

 private:
  CudaCtx* ctx_;
  std::vector<std::unique_ptr<CudaOp>> ops_;
};

// Host memory the replicas of one engine share for a job: pinned staging for
// the batch's rows (each replica writes its own rows), and the results.
struct CudaStaging {
  const Allocator* pinned = nullptr;  // tensors from it go up without staging
  Pinned rows[3];                     // by ReplicaDevice::Rows
  Pinned output;                      // a forward's gathered output
  Pinned results;                     // per replica: loss, correct count, statistics
  size_t result_stride = 0;
  // Byte offsets of a replica's results.
  static constexpr size_t kLossAt = 0, kCorrectAt = 8, kStatsAt = 16;
};

class CudaReplica final : public ReplicaDevice {
 public:
  // `index`: the replica's place in the group (its results' row);
  // `updated`: an event on its GPU's parameters' stream, waited for first.
  CudaReplica(const Model& model, int device, int index, CudaStaging* staging, const cudaEvent_t* updated);
  ~CudaReplica() override;

  Replica& graph() override { return graph_; }
  void begin(RunCtx& ctx) override;
  const Tensor& load(Rows which, const Tensor& host, int64_t off, int64_t rows) override;
  void store_output(Tensor& host, int64_t off) override;
  void loss(const RunCtx& ctx, const Tensor& target, bool count_correct) override;
  void keep_stats() override;
  double loss_value() override;
  int64_t correct_value() override;
  const float* stats() override;

  int device() const { return device_; }
  CudaStream& stream() { return stream_; }
  CudaExecutor& exec() { return exec_; }
  cudaEvent_t done() const { return done_; }  // recorded at the end of each job

 private:
  char* results() { return staging_->results.data() + index_ * staging_->result_stride; }

  const Model& model_;
  int device_, index_;
  CudaStaging* staging_;
  const cudaEvent_t* updated_;
  CudaStream stream_;
  CudaExecutor exec_;
  Replica graph_;
  std::unique_ptr<CudaLoss> loss_;  // null when the model has none
  Tensor rows_[3];                  // this replica's rows, on the device
  Tensor loss_value_, correct_;     // device scalars: float, int64
  cudaEvent_t done_ = nullptr;
};

}  // namespace dp
