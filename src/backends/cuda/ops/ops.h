// The CUDA implementations of the built-in layers and losses, keyed by the
// type name as on the CPU (layers/registry.cpp). An op is made per replica
// from the model's Layer object (whose hyperparameters and inferred shapes it
// reads), so it may keep per-replica state: descriptors, a cached algorithm.
//
// The contract is the CPU one (layers/layer.h), with every pointer in
// LayerIO on the replica's GPU: forward resizes and fills io.out; backward
// overwrites io.gin[i] (resized first; null entries need nothing) and ADDS
// into io.grads; io.tmp(k) gives device scratch that persists across steps.
// All work goes to ctx.cuda->stream, nothing synchronises the host.
#pragma once
#include <memory>

#include "backends/cuda/cuda.h"
#include "layers/layer.h"

namespace dp {

class CudaOp {
 public:
  virtual ~CudaOp() = default;
  virtual void forward(const RunCtx& ctx, LayerIO& io) = 0;
  virtual void backward(const RunCtx& ctx, LayerIO& io) = 0;
};

class CudaLoss {
 public:
  virtual ~CudaLoss() = default;
  // As Loss::forward_backward, but the replica's share of the batch loss is
  // written to *loss (one device float) instead of being returned.
  virtual void forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout,
                                float* loss) = 0;
};

// Null when the type has no CUDA implementation (a plugin's layer type without
// CUDA code; one with it runs its own, Layer::runs_on_cuda).
std::unique_ptr<CudaOp> make_cuda_op(const Layer& layer);
// Whether `type` is a built-in layer whose CUDA code is not written yet (the
// group then refuses the model on a GPU, saying so).
bool cpu_only_builtin(const std::string& type);
std::unique_ptr<CudaLoss> make_cuda_loss(const Loss& loss);

// *count (one device int64) = rows of out [N, C] whose first arg-max equals
// the int64 target [N], as Replica::correct counts them.
void cuda_count_correct(const RunCtx& ctx, const Tensor& out, const Tensor& target, int64_t* count);

// One factory per built-in; each lives in ops/<file>.cu.
using CudaOpFactory = std::unique_ptr<CudaOp> (*)(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_activation(const Layer& layer);  // relu, leaky_relu, sigmoid, tanh, gelu
std::unique_ptr<CudaOp> make_cuda_linear(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_dropout(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_softmax(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_add(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_concat(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_flatten(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_conv2d(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_max_pool2d(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_avg_pool2d(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_global_avg_pool(const Layer& layer);
std::unique_ptr<CudaOp> make_cuda_batch_norm(const Layer& layer);  // batch_norm, batch_norm1d, batch_norm2d
std::unique_ptr<CudaLoss> make_cuda_cross_entropy(const Loss& loss);
std::unique_ptr<CudaLoss> make_cuda_mse(const Loss& loss);

}  // namespace dp
