// One replica on a GPU: its stream and handles, the graph walk of
// group/replica.h with every layer run by its CUDA op, device staging for
// its rows of the batch, and the loss.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/ops/ops.h"
#include "group/replica.h"

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

struct CudaReplica {
  CudaReplica(const Model& model, int device, bool allow_tf32);
  ~CudaReplica();

  int device;
  CudaStream stream;
  CudaExecutor exec;
  Replica graph;
  std::unique_ptr<CudaLoss> loss;  // null when the model has none
  Tensor input, target, grad_output;  // this replica's rows, on the device
  Tensor loss_value, correct;         // device scalars: float, int64
  cudaEvent_t done = nullptr;         // the last job's work, all of it
  int64_t reduced_begin = 0;          // gradient buckets: [reduced_begin, P) is all-reduced
};

}  // namespace dp
